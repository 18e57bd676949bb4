"""The running webhook: one framework-free core, a face per functions-framework server,
the log line, the Prometheus metrics and the in-cluster TLS server.

`core` answers a request given as its method, path, headers and body, and returns a
status, headers and body. `flask_face` adapts it to functions-framework's default
server (Flask on gunicorn's threads), `asgi_face` to its ASGI server (Starlette on
uvicorn); main.py registers one target per face.
"""
