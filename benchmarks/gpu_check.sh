#!/usr/bin/env bash
# On a machine with a CUDA GPU: the device tests on CUDA, then the benchmarks -- under 8 minutes.
#   bash benchmarks/gpu_check.sh 2>&1 | tee gpu_check.log
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY=PASSIVE WANDB_MODE=disabled PYTHONUNBUFFERED=1
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" || exit 1
pip install -q -e ".[test]" >/dev/null 2>&1 || pip install -q --no-deps -e . >/dev/null
echo "== tests on CUDA"
PHYSATTACK_TEST_DEVICE=cuda timeout 200 python -m pytest -q tests/test_device.py tests/render tests/attack
echo "== renderer speed"
timeout 60 python benchmarks/render_speed.py --device cuda --views 16 --size 224
timeout 60 python benchmarks/render_speed.py --device cuda --views 256 --size 96
echo "== EOT step: share outside the victim, batch scaling (fp32, then bf16 + channels_last)"
timeout 90 python benchmarks/eot_step.py --device cuda --batches 8,64,256
timeout 90 python benchmarks/eot_step.py --device cuda --amp --channels-last --batches 8,64,256
echo "== canonical command on CUDA"
timeout 120 python benchmarks/canonical_attack.py device=cuda logger=none
