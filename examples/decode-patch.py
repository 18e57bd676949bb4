"""Print the JSON Patch inside an AdmissionReview response read from stdin."""

import base64
import json
import sys

response = json.load(sys.stdin)["response"]
print(json.dumps({key: value for key, value in response.items() if key != "patch"}, indent=2))
print(json.dumps(json.loads(base64.b64decode(response.get("patch", "W10="))), indent=2))
