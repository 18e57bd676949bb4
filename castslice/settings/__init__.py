"""Settings, the bottom layer: what each CASTSLICE_* setting and the enrolment policy can be.

Values and their parsing only: nothing here reads the process environment, speaks
Kubernetes' wire format or knows a backend.
"""
