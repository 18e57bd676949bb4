"""functions-framework entry point: `functions-framework --target=mutate --asgi`."""

import os
import sys

# functions-framework's ASGI server imports its aio module before it loads this file; its
# Flask server does not, and would answer every review with a 500 page.
if "functions_framework.aio" not in sys.modules:
    raise SystemExit(
        "castslice: serve it with functions-framework's ASGI server: "
        "functions-framework --target=mutate --asgi"
    )

import functions_framework.aio
from starlette.requests import Request
from starlette.responses import Response

from castslice.config import ConfigError
from castslice.environment import load_config
from castslice.webhook import Webhook

try:
    _config = load_config(os.environ)
    if _config.metrics:
        # Imported only when asked for: with metrics off, prometheus_client is never loaded.
        from castslice.metrics import serve_metrics

        _webhook = Webhook(_config, log_review=serve_metrics(_config.metrics_port))
    else:
        _webhook = Webhook(_config)
except ConfigError as error:
    raise SystemExit(f"castslice: invalid configuration: {error}") from None


@functions_framework.aio.http
async def mutate(request: Request) -> Response:
    return await _webhook.serve(request)
