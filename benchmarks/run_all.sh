#!/usr/bin/env bash
# Every benchmark whose figures the README cites, exactly as run (each study with its pilot in a folder of its own,
# first_study/ to sixth_study/; the machinery's in allocation_time/, overhead/, engine_cost/, beyond_options/, demo/;
# common/ holds what several share). Each writes to its folder's results/ and prints the README's table. About an hour
# on 2 CPU cores; run it on an otherwise idle machine (the timings are ratios measured side by side, but a busy machine
# still blurs them). Before the folders, every script was benchmarks/NAME.py and wrote to benchmarks/results/: the
# commands the stored results record name those paths.
set -euo pipefail
cd "$(dirname "$0")/.."

python benchmarks/overhead/startup_time.py               # --help and import times, each in a fresh process
python benchmarks/allocation_time/allocator_speed.py     # allocation time against a heap greedy and a dynamic program
python benchmarks/overhead/step_overhead.py              # step time against GRPOTrainer
python benchmarks/overhead/tracker_scale.py              # tracker memory and checkpoint cost at 10^6 prompts
python benchmarks/overhead/column_checks.py              # construction-time column checks at 2 million rows
python benchmarks/beyond_options/beyond_options.py       # the options beyond both papers, each against the run without
python benchmarks/allocation_time/token_cap_speed.py     # allocation time under a token cap
OMP_NUM_THREADS=1 python benchmarks/second_study/study_pilot.py --seeds 4   # the second study's regime, uniform alone
python benchmarks/demo/demo_record.py                    # what `trl-budget demo` prints with its defaults, its seconds
ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
    python benchmarks/demo/demo_record.py                # the same on AVX2 kernels (an AVX-512 CPU running them)

# The second allocation study (pre-registered in the script: 10 variants x 20 paired seeds, two processes; stored runs
# are read back, so it resumes where it stopped): compare_allocators.json/.png and trl_budget/demo/study_answer.json.
OMP_NUM_THREADS=1 python benchmarks/second_study/allocation_study.py

# The third study's coverage replay (the warm start's own answers, each rule's code replayed; chooses the rounds
# settings before any RL run of them), then the pre-registered study: 10 arms x 20 paired seeds (40-59), resuming.
python benchmarks/third_study/coverage_replay.py
OMP_NUM_THREADS=1 python benchmarks/third_study/rounds_study.py
# Whether the current code re-trains stored third-study runs bit for bit (one line per run; exit 1 if any differs).
OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py reinforce-ada-positive:40 \
    reinforce-ada-balanced:40 uniform-n8:40 rounds-uniform:40 knapsack:41 coba:40

# vLLM request layout, in the engine venv (bash tests/vllm_engine/setup_venv.sh): short completions, then every
# rollout run to 128 tokens.
.venv-vllm/bin/python benchmarks/engine_cost/vllm_request_layout.py
.venv-vllm/bin/python benchmarks/engine_cost/vllm_request_layout.py --ignore-eos --max-tokens 128 \
    --output benchmarks/engine_cost/results/vllm_request_layout-long.json
# The rounds' cost per batch through the real engine (server and colocate), the third study's arm settings.
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py
# The same at reasoning-like completion lengths (colocate), with dynamic sampling; then uniform's own cost curve and
# rounds until mixed in few, large rounds, each beside uniform n = 8 again.
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py --lengths real --modes colocate \
    --batches 6 --skip 1 --repeats 2
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py --lengths real --modes colocate \
    --batches 4 --skip 1 --repeats 2 --arms uniform-n12 uniform-n16 rounds-uniform-large \
    --output benchmarks/engine_cost/results/rounds_engine_cost-real-more.json
# Rounds prompt by prompt (budget_per_prompt_rounds) in the trainer beside round by round, colocate then server.
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py --lengths real --modes colocate \
    --batches 6 --skip 1 --repeats 2 --arms reinforce-ada-positive reinforce-ada-positive-per-prompt \
    --output benchmarks/engine_cost/results/rounds_engine_cost-per-prompt.json
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/rounds_engine_cost.py --lengths real --modes server \
    --batches 6 --skip 1 --repeats 2 --arms reinforce-ada-positive reinforce-ada-positive-per-prompt \
    --output benchmarks/engine_cost/results/rounds_engine_cost-per-prompt-server.json
# What removing the round barrier buys, on the engine alone: every path, then the exact per-prompt path beside the
# synchronous one, colocate and server.
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py --batches 5
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py --batches 4 --jobs \
    colocate:reinforce-ada-positive/rounds colocate:reinforce-ada-positive/per-prompt \
    --output benchmarks/engine_cost/results/per_prompt_rounds-exact.json
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py --batches 4 --jobs \
    colocate:rounds-uniform/rounds colocate:rounds-uniform/per-prompt \
    --output benchmarks/engine_cost/results/per_prompt_rounds-until-mixed.json
OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/engine_cost/per_prompt_rounds.py --batches 4 --jobs \
    server:reinforce-ada-positive/rounds server:reinforce-ada-positive/per-prompt \
    --output benchmarks/engine_cost/results/per_prompt_rounds-server.json

# The fourth study's pilot on the sorting task (its warm start: python -m trl_budget.demo.build_warm_start --task
# sorting): the warm start level by level, then uniform n = 8 and 16 on every pre-registered candidate.
python benchmarks/fourth_study/fourth_study_pilot.py --describe-start
python benchmarks/fourth_study/fourth_study_pilot.py
python benchmarks/fourth_study/fourth_study_pilot.py --time-alone --candidates sort-10-12-1e-4 sort-10-12-2e-4
# The fourth study (pre-registered in its script: two regimes, 11 arms, seeds 300-319). Its 420 runs are stored in
# fourth_study/results/run_cache; training them takes the code they executed (STUDY_CODE; the script says how), so this
# summarises them: fourth_study/results/fourth_study.json. Then whether stored runs re-train bit for bit on this machine
# with this code (fourth_study/results/fourth_study_machines.json says which machine trained each run: bit for bit only
# there).
python benchmarks/fourth_study/fourth_study.py --stored-only
OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py arithmetic/knapsack:311 \
    sorting/knapsack-history:319

# The fifth study's pilots and study. Engine time of SPO's layout on the real engine; the third family's pilots on
# uniform GRPO alone (equations: pilots 1 and 2; brackets, its warm start built by python -m
# trl_budget.demo.build_warm_start --task brackets: pilot 3, which chose the regime); the arms pilot (the rule put
# against SPO, the paired SDs); then the pre-registered study (3 regimes, 7 arms, seeds 500-519), trained from a
# worktree of its registering commit (STUDY_CODE), resuming from its stored runs.
.venv-vllm/bin/python benchmarks/fifth_study/engine_time.py
OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --describe-start
OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --processes 1
OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --pilot 2 --processes 2
OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --pilot 3 --describe-start
OMP_NUM_THREADS=1 python benchmarks/fifth_study/pilot.py --pilot 3 --processes 2
python benchmarks/fifth_study/pilot.py --pilot 3 --stored-only
OMP_NUM_THREADS=1 python benchmarks/fifth_study/arms_pilot.py --processes 1
OMP_NUM_THREADS=1 python benchmarks/fifth_study/fifth_study.py
# Read after the study: the comparisons not pre-registered (post hoc), the defaults' rule (fixed before any figure was
# read) with the demo's answer for its default pair, and two stored runs re-trained on the code at HEAD: on the CPU kind
# that trained them directly; on another (here an Intel Xeon), with the study's code first and then against it
python benchmarks/fifth_study/post_hoc.py
python benchmarks/fifth_study/defaults_rule.py
OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py fifth:brackets/spo:500 fifth:sorting/uniform-n8-history:501
git worktree add /tmp/study_code fca3fcc && (cd /tmp/study_code && PYTHONPATH=/tmp/study_code OMP_NUM_THREADS=1 \
    python "$OLDPWD/benchmarks/common/retrain_stored.py" --keep /tmp/study_ref \
    --record "$OLDPWD/benchmarks/fifth_study/results/retrain_intel_study_code.json" \
    fifth:brackets/spo:500 fifth:sorting/uniform-n8-history:501)
OMP_NUM_THREADS=1 python benchmarks/common/retrain_stored.py --against /tmp/study_ref \
    --record benchmarks/fifth_study/results/retrain_intel_head.json fifth:brackets/spo:500 fifth:sorting/uniform-n8-history:501
# The sixth study (its runs are trained over several sessions; the script resumes from the stored ones):
OMP_NUM_THREADS=1 python benchmarks/sixth_study/pilot.py
OMP_NUM_THREADS=1 python benchmarks/sixth_study/pilot.py --pilot 2
OMP_NUM_THREADS=1 python benchmarks/sixth_study/sixth_study.py
# after its last run, nothing beside them: the trainer's time a batch under every arm, and the layouts' engine time
OMP_NUM_THREADS=1 python benchmarks/overhead/sixth_study_arms.py
.venv-vllm/bin/python benchmarks/sixth_study/engine_time.py

# The first allocation study (pool regime, 6 pre-registered variants x 5 paired seeds): two single-threaded processes,
# one per core; then the exploratory variant added after their first results; then one summary over all the runs
# (compare_allocators-pool.json).
PREREGISTERED="uniform knapsack coba knapsack-no-fallback knapsack-probe2 coba-probe2"
OMP_NUM_THREADS=1 python benchmarks/first_study/compare_allocators.py --variants $PREREGISTERED --seeds 3 \
    --first-seed 0 --name study-seeds0-2 &
OMP_NUM_THREADS=1 python benchmarks/first_study/compare_allocators.py --variants $PREREGISTERED --seeds 2 \
    --first-seed 3 --name study-seeds3-4 &
wait
OMP_NUM_THREADS=1 python benchmarks/first_study/compare_allocators.py --variants knapsack-probe2-shrunk --seeds 5 \
    --name explore-shrunk
RUNS=benchmarks/first_study/results/runs
python benchmarks/first_study/compare_allocators.py --from-runs $RUNS/study-seeds0-2_runs.json \
    $RUNS/study-seeds3-4_runs.json $RUNS/explore-shrunk_runs.json --name compare_allocators-pool
rm benchmarks/first_study/results/study-seeds*.* benchmarks/first_study/results/explore-shrunk.*

# The secondary regime (the pool plus the 3+3 level): 4 variants x 5 paired seeds, two processes again.
OMP_NUM_THREADS=1 python benchmarks/first_study/compare_allocators.py --regime spread --seeds 3 --first-seed 0 \
    --name spread-seeds0-2 &
OMP_NUM_THREADS=1 python benchmarks/first_study/compare_allocators.py --regime spread --seeds 2 --first-seed 3 \
    --name spread-seeds3-4 &
wait
python benchmarks/first_study/compare_allocators.py --regime spread --from-runs $RUNS/spread-seeds0-2_runs.json \
    $RUNS/spread-seeds3-4_runs.json
rm benchmarks/first_study/results/spread-seeds*.*

python benchmarks/first_study/compare_allocators.py --regime small   # the earlier, small regime (4 variants x 3 seeds)
