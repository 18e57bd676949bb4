"""functions-framework entry points: one CastSlice, two of functions-framework's servers.

    functions-framework --target=mutate        # its default server: Flask on gunicorn
    functions-framework --target=mutate_asgi   # its ASGI server: Starlette on uvicorn

functions-framework serves an `aio` target with its ASGI server by itself, so neither
needs another flag. Both answer through the same core (castslice/serve/core.py).
"""

import os
import sys

import flask
import functions_framework
import functions_framework.aio
import werkzeug
from starlette.requests import Request
from starlette.responses import Response

from castslice.environment import load_config
from castslice.serve.asgi_face import serve_asgi
from castslice.serve.core import Webhook
from castslice.serve.flask_face import answer_first, not_found_page, serve_flask
from castslice.serve.start import announce, functions_framework_address
from castslice.settings.config import ConfigError

try:
    _config = load_config(os.environ)
    if _config.metrics:
        # Imported only when asked for: with metrics off, prometheus_client is never loaded.
        from castslice.serve.metrics import serve_metrics

        _webhook = Webhook(_config, log_review=serve_metrics(_config.metrics_port))
    else:
        _webhook = Webhook(_config)
except ConfigError as error:
    raise SystemExit(f"castslice: invalid configuration: {error}") from None

# functions-framework's command imports this file before it binds: the line is written now,
# with the address it binds next. gunicorn under castslice/serve/tls.py writes it once bound.
_address = functions_framework_address(sys.argv, os.environ)
if _address is not None:
    announce(_config, os.environ, [_address])


@functions_framework.aio.http
async def mutate_asgi(request: Request) -> Response:
    return await serve_asgi(_webhook, request)


if flask.has_app_context():
    # Loaded by the Flask server (its default), which may serve either target.
    flask.current_app.register_error_handler(404, not_found_page)
    _app = flask.current_app._get_current_object()
    _app.wsgi_app = answer_first(_webhook, _app.wsgi_app, os.environ)

    @functions_framework.http
    def mutate(request: flask.Request) -> werkzeug.Response:
        return serve_flask(_webhook, request)

else:
    # Loaded by the ASGI server itself (`--asgi`): `--target=mutate --asgi`, the command
    # of earlier releases, gets the ASGI face rather than a Flask view it cannot call.
    @functions_framework.aio.http
    async def mutate(request: Request) -> Response:
        return await serve_asgi(_webhook, request)
