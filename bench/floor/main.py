"""The benchmark's floor: the cost of functions-framework alone, on each of its servers.

It reads the body, as any webhook must, and answers a constant AdmissionReview.
Served with the same command and settings as CastSlice (`--target=mutate`: the
ASGI server; `--target=mutate_flask`: the default Flask server), the difference
between the two is what CastSlice itself costs on that server.
"""

import flask
import functions_framework
import functions_framework.aio
from starlette.requests import Request
from starlette.responses import Response

ANSWER = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"0f6f3a52-0c41-4c7e-9a51-6d1f5b0c2e11","allowed":true}}'
)


@functions_framework.aio.http
async def mutate(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, 200, media_type="application/json")


@functions_framework.http
def mutate_flask(request: flask.Request) -> flask.Response:
    request.get_data()
    return flask.Response(ANSWER, 200, mimetype="application/json")
