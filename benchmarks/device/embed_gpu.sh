#!/usr/bin/env bash
# On the device machine (16 cores, one H200), from the project root: `bash .devrun-embed/embed_gpu.sh`
# after pack_embed.sh. The default model's chunks/s on CUDA (torch fp32 and fp16) and on that
# machine's CPU (torch fp32), batch sizes $BATCHES, on the packed stdlib chunks; load times and
# each variant's minimum cosine to CPU fp32. Writes $OUT/embed_gpu.json (benchmarks/embed_throughput.py's
# object), $OUT/embed_gpu.log (progress) and $OUT/env.txt (GPU, python, torch, sentence-transformers).
set -u
R=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$R/.." && pwd)
OUT=${OUT:-/tmp/embed-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$ROOT HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "cpus $(nproc); $(python3 --version)"
  python3 -c 'import torch, sentence_transformers as st, numpy; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "sentence-transformers", st.__version__, "numpy", numpy.__version__)'
} 2>&1 | tee "$OUT/env.txt"
timeout "${LIMIT:-450}" python3 "$ROOT/benchmarks/embed_throughput.py" --texts "$R/texts.json.gz" \
  --model "$R/model" --devices "${DEVICES:-cuda,cpu}" --batches "${BATCHES:-32,128,512}" \
  --rounds "${ROUNDS:-3}" --chunks "${CHUNKS:-2000}" > "$OUT/embed_gpu.json" 2> "$OUT/embed_gpu.log"
rc=$?
echo "embed_throughput rc=$rc" | tee -a "$OUT/env.txt"
tail -n 12 "$OUT/embed_gpu.log"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: {"best": v["best_chunks_per_s"], "load_s": v["load_seconds"], "min_cos": v.get("min_cosine_vs_cpu_fp32")} for k, v in d["variants"].items()}), d.get("speedup_vs_best_cpu"))' "$OUT/embed_gpu.json" 2>/dev/null
exit $rc
