#!/usr/bin/env bash
# pack_embed.sh [DEST] — run here, from the project root (with `make install` done). Builds DEST
# (default .devrun-embed, ignored by git) with what embed_gpu.sh needs on the device machine, whose
# python3 cannot install anything: the default model with its weights in fp16 (45 MB instead of
# 90 MB: the device takes at most 64 MiB with the working tree, ~5 MB), checked here against fp32
# (every probe chunk's cosine >= 0.999, else this fails), 2000 stdlib chunks' texts (the project's
# own chunker: `embed_throughput.py --save-texts`), and embed_gpu.sh. The project's code travels
# as the working tree. Then: device `run` with carry [".devrun-embed"], timeout_s 540, command
# `bash .devrun-embed/embed_gpu.sh` (see benchmarks/README.md).
set -eu
D=${1:-.devrun-embed}
[ -f pyproject.toml ] || { echo "run from the project root"; exit 1; }
G=$(git rev-parse --git-dir)
mkdir -p "$D" "$G/info"
grep -qx "/$D/" "$G/info/exclude" 2>/dev/null || echo "/$D/" >> "$G/info/exclude"
PY=${PY:-.venv/bin/python}
"$PY" benchmarks/embed_throughput.py --chunks "${CHUNKS:-2000}" --save-texts "$D/texts.json.gz"
"$PY" benchmarks/embed_throughput.py --texts "$D/texts.json.gz" --pack-fp16 "$D/model" \
  --pack-check-chunks "${CHECK:-300}" | tee "$D/pack.json"
cp "$(dirname "$0")/embed_gpu.sh" "$D/embed_gpu.sh"
du -sh "$D"; echo "carry [\"$D\"] (at most 64 MiB with the working tree)"
