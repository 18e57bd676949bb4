"""functions-framework entry point: `functions-framework --target=mutate`."""

import os

import functions_framework

from castslice.config import ConfigError, load_config
from castslice.webhook import Webhook

try:
    _webhook = Webhook(load_config(os.environ))
except ConfigError as error:
    raise SystemExit(f"castslice: invalid configuration: {error}") from None


@functions_framework.http
def mutate(request):
    return _webhook.serve(request)
