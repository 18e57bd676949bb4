"""The decision: from one AdmissionRequest to one Outcome.

`admission` runs the pipeline (select and enrol, resolve slices, place through the
backend, patch, reply); each step it calls sits below it. No HTTP, no files, no
process environment.
"""
