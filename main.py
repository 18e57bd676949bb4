"""functions-framework entry point: `functions-framework --target=mutate`."""

import os

import functions_framework
from werkzeug.exceptions import HTTPException

from castslice.config import ConfigError, load_config
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


@functions_framework.http
def mutate(request):
    return _webhook.serve(request)


# functions-framework answers /robots.txt and /favicon.ico itself, with HTML.
functions_framework.errorhandler(HTTPException)(_webhook.http_error)
