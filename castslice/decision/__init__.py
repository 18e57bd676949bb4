"""The decision: from one AdmissionRequest to one Outcome.

`admission` runs the pipeline (enrol, resolve slices, place through the backend, patch,
reply); each step it calls sits below it. No HTTP, no files, no process environment.
Which objects reach it at all is the registration's business (castslice.render.selection).
"""
