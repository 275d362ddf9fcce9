#!/usr/bin/env bash
# ctest openapi_document: api/openapi.yaml through two standard validators.
#   1. @apidevtools/swagger-parser validate(): the document against the
#      OpenAPI 3.1 schema, every $ref resolved;
#   2. @redocly/cli lint (recommended-strict, redocly.yaml): structure, every
#      operation's responses, examples against their schemas.
# Both come from package-lock.json (scripts/setup.sh runs `npm ci` here).
# Any error or warning fails the test.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
doc="${1:-$here/../../api/openapi.yaml}"
if [ ! -x "$here/node_modules/.bin/redocly" ] || [ ! -d "$here/node_modules/@apidevtools/swagger-parser" ]; then
  echo "openapi_document: the validators are not installed in $here/node_modules;" >&2
  echo "run scripts/setup.sh (it runs 'npm ci' in tests/openapi)" >&2
  exit 1
fi
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true NO_UPDATE_NOTIFIER=1
node "$here/validate.js" "$doc"
"$here/node_modules/.bin/redocly" lint --config "$here/redocly.yaml" --format=stylish "$doc"
