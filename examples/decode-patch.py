"""Print an AdmissionReview response read from stdin, its JSON Patch one operation a line."""

import base64
import json
import sys

response = json.load(sys.stdin)["response"]
print(json.dumps({key: value for key, value in response.items() if key != "patch"}))
for operation in json.loads(base64.b64decode(response.get("patch", "W10="))):
    print(json.dumps(operation))
