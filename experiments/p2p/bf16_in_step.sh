export NCCL_NVLS_ENABLE=0
for rep in 1 2; do for H in 1024-1024 2048-2048; do for tree in before after; do
  [ $tree = before ] && export PYTHONPATH=$PWD/.before PERFLAB_GIT_COMMIT=55e201d || export PYTHONPATH=$PWD PERFLAB_GIT_COMMIT=eba0f3e
  for v in none as-is twice; do
    timeout 90 mpirun --allow-run-as-root -n 2 -x PYTHONPATH -x NCCL_NVLS_ENABLE -x PERFLAB_GIT_COMMIT python3 experiments/p2p/bf16_in_step.py $v $H 2>/dev/null | tail -1 | \
      python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(tree='$tree', rep=$rep); print(json.dumps(d))"
  done
done; done; done
