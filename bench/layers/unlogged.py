"""The whole review, answered as CastSlice does, without its log line."""

import functions_framework

from castslice.config import load_config
from castslice.webhook import Webhook

_webhook = Webhook(load_config({}), log_review=lambda record: None)


@functions_framework.http
def mutate(request):
    return _webhook.serve(request)
