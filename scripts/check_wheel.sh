#!/usr/bin/env bash
# Install gemma-fit as users do: build the wheel, install it into a fresh virtual environment
# outside the checkout, and run the README's main command and the other entry points from there.
# An editable install reads the repo's folders directly and hides packaging bugs; this does not.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "[check_wheel] $*" >&2; }

step "building the wheel"
python3 -m pip wheel -q --no-deps "$repo" -w "$work/dist" 2>&1 | grep -v '^WARNING: Location' || true
wheel=$(ls "$work"/dist/gemma_fit-*.whl)
step "installing $(basename "$wheel") into a fresh venv in $work"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel" 2>&1 | grep -v '^WARNING: Location' || true
cd "$work"   # nothing of the checkout on the path from here on
gf="$work/venv/bin/gemma-fit"
where=$("$work/venv/bin/python" -c 'import gemma_fit, sys; sys.stdout.write(gemma_fit.__file__)')
case "$where" in "$work"/venv/*) ;; *) echo "gemma_fit imported from $where, not the venv" >&2; exit 1 ;; esac

version=$("$work/venv/bin/python" -c 'import gemma_fit; print(gemma_fit.__version__)')
step "gemma-fit --version"
[ "$("$gf" --version)" = "gemma-fit $version" ]
step "the README's main command"
"$gf" check --gpu a4000 --model 9b --quant q5_k_m
step "db validate"
"$gf" db validate
step "synth + inspect"
"$gf" synth "$work/m.gguf" --model gemma-3-270m --quant q8_0
"$gf" inspect "$work/m.gguf" --gpu rtx-4090 --json > "$work/inspect.json"
"$work/venv/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["verdict"] == "go", d["verdict"]' "$work/inspect.json"
step "report --html"
"$gf" report --gpu rtx-4090 --gpu a4000 --model 9b --model gemma-3-27b --quant q4_k_m --html "$work/r.html" > /dev/null
grep -q "gemma-3-27b" "$work/r.html"
step "list and check --json from the installed data"
"$gf" list models > /dev/null
"$gf" check --gpu rtx-4090 --model gemma-3-12b --engine vllm --quant awq --json > /dev/null
step "recommend and buy from the installed quality and price data"
"$gf" recommend --gpu rtx-3090 --ctx 8192 --json > "$work/rec.json"
"$work/venv/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["candidates"][0]["quality"], d' "$work/rec.json"
"$gf" buy --model gemma-3-27b --ctx 32768 --budget 1000 --segment consumer --json > "$work/buy.json"
"$work/venv/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["options"][0]["price_usd"], d' "$work/buy.json"
"$gf" check --gpu rtx-4090 --model gemma-4-E4B --images 1 > /dev/null
"$gf" buy --model gemma-3-12b --ctx 8k --segment consumer --html "$work/buy.html" > /dev/null
grep -q "gemma-3-12b" "$work/buy.html"
step "a newcomer's inputs: names as typed, k suffixes, filtered lists, a typo answered with a suggestion"
"$gf" check --gpu rtx-4090 --model "Gemma 3 12B" --ctx 32k > /dev/null
[ "$("$gf" list gpus --vendor nvidia --min-memory 80 | wc -l)" -lt 40 ]
rc=0; "$gf" check --gpu rtx-4090 --model gemma-3-12 2> "$work/typo.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "did you mean" "$work/typo.txt"
step "serving speed from the installed engine terms, and a cluster plan"
"$gf" check --gpu h100-sxm --model gemma-3-27b --engine vllm --parallel 16 --ctx 8192 --output-tokens 256 --json \
    > "$work/vllm.json"
"$work/venv/bin/python" -c 'import json,sys; p=json.load(open(sys.argv[1]))["performance"]; assert p["aggregate_tokens_per_s"] > p["decode_tokens_per_s"] > 0, p' "$work/vllm.json"
printf 'name: two boxes\nnetwork: {bandwidth_gbit: 10, latency_us: 50}\nnodes:\n  - {name: head, host: 10.0.0.1, gpus: [rtx-3090]}\n  - {name: worker, host: 10.0.0.2, gpus: [rtx-3090]}\n' > "$work/cluster.yaml"
"$gf" serve-plan --hardware "$work/cluster.yaml" --model gemma-3-27b --quant q4_k_m --parallel 2 --rate 0.2 --json > "$work/plan.json"
"$work/venv/bin/python" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "--rpc 10.0.0.2:50052" in d["commands"][-1] and d["network"]["boundaries_crossing_network"] == 1, d["commands"]' "$work/plan.json"
step "ok: the wheel installs and runs outside the checkout"
