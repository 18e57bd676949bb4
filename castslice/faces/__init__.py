"""The faces: what users and servers call. The HTTP function (`serving`), the command
line (`cli`), policy mode (`policymode`), the doctor (`doctor`), and what they share:
the configuration read from the environment once, the log line, the registration.
"""
