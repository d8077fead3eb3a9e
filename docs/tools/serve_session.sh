#!/usr/bin/env bash
# The serving guide's console session, run for real by docs_output.py: export the digits MLP, serve it on a
# free port, send two requests with curl (one valid, one with a NaN), stop the server.
set -euo pipefail
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
torchwork export examples/digits_model.py:build --format onnx -o "$work/digits" > "$work/export.log" 2>&1
echo "\$ torchwork export examples/digits_model.py:build --format onnx -o artifacts/digits"
grep -E "^\* deploy|: chosen:" "$work/export.log" | tail -1
echo "\$ torchwork serve artifacts/digits --port 0"
torchwork serve "$work/digits" --port 0 > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
sed "s|$work/digits|artifacts/digits|g" "$work/serve.log"
address=$(grep -o "http://127.0.0.1:[0-9]*" "$work/serve.log" | head -1)
port=${address##*:}
pixels=$(python -c "from sklearn.datasets import load_digits; print([round(float(v) / 16, 3) for v in load_digits().data[0]])")
echo "\$ curl -s -H 'Content-Type: application/json' localhost:$port/predict -d '{\"inputs\": [[0.0, 0.0, 0.312, 0.812, ...64 pixels]]}'"
curl -s -H 'Content-Type: application/json' "localhost:$port/predict" -d "{\"inputs\": [$pixels]}" | cut -c1-150
echo
echo "\$ curl -s -H 'Content-Type: application/json' localhost:$port/predict -d '{\"inputs\": [[0.5, NaN]]}'"
curl -s -H 'Content-Type: application/json' "localhost:$port/predict" -d '{"inputs": [[0.5, NaN]]}'
echo
