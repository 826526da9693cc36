#!/usr/bin/env bash
# Ad-hoc hyper-parameter sweep helper: bench/sweep.sh NAME [overrides...]
set -u
name=$1; shift
out=/tmp/sweep/$name
rm -rf "$out"; mkdir -p /tmp/sweep
timeout 200 .venv/bin/python -m launch.train --config=configs/apex_cartpole.py --config.run_dir="$out" "$@" > "/tmp/sweep/$name.log" 2>&1
python3 -c "
import json,sys; s=json.load(open('$out/summary.json'))
print('$name', {k: (round(v,1) if isinstance(v,float) else v) for k,v in s.items() if k in ('env_steps','learner_steps','eval_return_mean','solved_at_wall_seconds','solved_at_env_steps','env_steps_per_second','learner_steps_per_second','samples_per_insert','first_learner_step_seconds')})"
