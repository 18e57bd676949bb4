"""The benchmark's floor: the cost of functions-framework alone.

It reads the body, as any webhook must, and answers a constant
AdmissionReview. Served with the same command and settings as CastSlice
(functions-framework's ASGI server), the difference between the two is what
CastSlice itself costs.
"""

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
