"""Checks a log of musterd answers (one JSON object a line: method, url,
status, content_type, body) against api/openapi.yaml; exits 1 naming every
answer that does not conform, or when the log is missing or too short to
have exercised the API (ctest sdk_cpp_conformance reads sdk_cpp_test's log).

Usage: python3 tests/openapi_check_log.py LOG [MIN_ANSWERS]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openapi_contract import ContractError, shared_contract  # noqa: E402


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, minimum = argv[1], int(argv[2]) if len(argv) > 2 else 10
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        print("%s: cannot read the answers log (did the test that writes it run?): %s" % (path, e), file=sys.stderr)
        return 1
    contract = shared_contract()
    failures, seen = [], {}
    for e in lines:
        template, _ = contract.match(e["method"], e["url"])
        key = "%s %s %s" % (e["method"], template or "(no route)", e["status"])
        seen[key] = seen.get(key, 0) + 1
        try:
            contract.check_response(e["method"], e["url"], e["status"], e["body"], e["content_type"])
        except ContractError as err:
            failures.append(str(err))
    for key in sorted(seen):
        print("%4d  %s" % (seen[key], key))
    if failures:
        print("\n%d of %d answers do not match api/openapi.yaml:\n%s" % (len(failures), len(lines), "\n".join(failures)),
              file=sys.stderr)
        return 1
    if len(lines) < minimum:
        print("only %d answers in %s (expected at least %d)" % (len(lines), path, minimum), file=sys.stderr)
        return 1
    print("%d answers conform to api/openapi.yaml" % len(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
