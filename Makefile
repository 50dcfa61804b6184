# aioenv: `make demo` and `make test` work on a fresh machine with Python 3.11+, pip and gcc.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: demo test test-bench test-matrix test-matrix-quick extras lint typecheck docs docs-check bench bench-quick bench-goals soak fuzz image image-test test-containers clean

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	touch $@

$(VENV)/.installed: $(VENV)/.created pyproject.toml setup.py aioenv/_speedups.c
	$(PIP) install -q -e .
	touch $@

# torch first, pinned to the CPU build: the sb3 extra then finds it installed (any other torch
# request may pull a multi-GB CUDA build).
$(VENV)/.installed-test: $(VENV)/.created pyproject.toml setup.py aioenv/_speedups.c
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[test,sb3,docs]"
	touch $@ $(VENV)/.installed $(VENV)/.installed-docs

$(VENV)/.installed-docs: $(VENV)/.created pyproject.toml setup.py aioenv/_speedups.c
	$(PIP) install -q -e ".[docs]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/aioenv demo

# what the examples need beyond aioenv: aiohttp (web_env.py, llm_agent.py), stable-baselines3 (sb3_ppo.py)
extras: $(VENV)/.installed
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[examples,sb3]"

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check aioenv workers tests benchmarks examples docker docs/*.py noxfile.py setup.py
	$(VENV)/bin/ruff format --check aioenv workers tests benchmarks examples docker docs/*.py noxfile.py setup.py

# the packages (pyproject's [tool.mypy]), then the image test and the manifest test, under the same config
typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy docker/image_test.py tests/deploy/test_manifests.py
	$(VENV)/bin/mypy docs/hooks.py docs/figures.py docs/check_site.py tests/docs/test_site.py

# the suite in 3 test processes (pytest-xdist) on a 2-core machine: its tests start worker processes and wait
# on them, so a test process per core left the cores idle a quarter of the time (13.5 min of user CPU over a
# 10.7 min run with 2); a third fills that (465 s against 581 s for the whole suite on 2026-11-29).
# `$(PY) -m pytest` runs it in one.
# A test process that dies (a C extension's segfault) ends the run as a failure naming its test, rather than
# being replaced: pytest-xdist 3.8's scope scheduler, which tests/conftest.py uses, requeues the dead
# process's finished tests as empty units and then waits for them forever (pytest-xdist#1378).
PYTEST_XDIST = -n 3 --max-worker-restart=0
# Python keeps each module's bytecode, and pytest each test module's rewritten one, in the tree's __pycache__
# folders (ignored by git), even where the environment says PYTHONDONTWRITEBYTECODE: without them every worker
# process a test starts compiled aioenv's modules afresh (0.1 s of CPU each) and every test process rewrote the
# asserts of every test module (collection 27 -> 14 s a process; tests/e2e and tests/server 239 -> 206 s, 2 cores).
unexport PYTHONDONTWRITEBYTECODE
test: lint typecheck
	$(PY) -m pytest $(PYTEST_XDIST) -m "not bench"

# the benchmark scripts' smoke runs (tests marked `bench`: each script end to end at tiny sizes, its output's shape
# checked, never its speed); CI (.ci/run) runs them after `make test`, which leaves them out to stay under 10 minutes
test-bench: $(VENV)/.installed-test
	$(PY) -m pytest $(PYTEST_XDIST) -m bench

# The documentation site into site/ (mkdocs.yml): docs/*.md, an API page per public module from its docstrings,
# and the figures, drawn from benchmarks/results at each build (docs/figures.py, through docs/hooks.py). Strict: a
# broken link, a missing page or an unresolved reference fails it (tests/docs, in `make test`, builds it too).
# Open site/index.html, or serve it: `python -m http.server -d site`.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The built site in a real headless Chromium (Debian's package, installed here when missing; Playwright drives it
# and brings no browser of its own): every page loads with no console error and no request leaving the machine,
# and every picture displays. Writes a screenshot of the home page to SCREENSHOT. Not part of `make test`.
SCREENSHOT ?= $(or $(TMPDIR),/tmp)/aioenv-site-home.png
CHROMIUM ?= /usr/bin/chromium
docs-check: docs
	@test -x $(CHROMIUM) || { apt-get update -q && apt-get install -y -q chromium; } \
		|| { echo "make docs-check: no $(CHROMIUM), and apt-get install chromium failed (as root?)" >&2; exit 1; }
	$(PIP) install -q -e ".[docs,docs-check]"
	$(PY) docs/check_site.py site --chromium $(CHROMIUM) --screenshot $(SCREENSHOT)

# the version matrix (noxfile.py; docs/versions.md): the suites against the oldest and newest release of each
# dependency pyproject.toml admits, a virtualenv per cell under .nox (reused). Not part of `make test`.
# `make test-matrix CELLS="oldest sb3"` runs some cells; `make test-matrix-quick` the one CI runs (.ci/run).
CELLS ?=
test-matrix: $(VENV)/.created
	$(PIP) install -q -e ".[matrix]"
	$(VENV)/bin/nox -r $(if $(CELLS),-s $(CELLS))

test-matrix-quick: $(VENV)/.created
	$(PIP) install -q -e ".[matrix]"
	$(VENV)/bin/nox -r -s oldest-quick build-oldest

# the chaos soak for minutes (tests/chaos): SOAK_SECONDS per scenario, a summary table, exit 1 on any violation or leak
SOAK_SECONDS ?= 60
soak: $(VENV)/.installed-test
	$(PY) -m tests.chaos.soak --seconds $(SOAK_SECONDS)

# coverage-guided fuzzing of the wire decoders (tests/fuzz): FUZZ_SECONDS per target; the corpus grows in the repo
FUZZ_SECONDS ?= 60
fuzz: $(VENV)/.installed-test
	$(PIP) install -q -e ".[fuzz]"
	$(PY) -m tests.fuzz.run --seconds $(FUZZ_SECONDS)

bench: $(VENV)/.installed-test
	$(PIP) install -q -e ".[bench]"
	$(PY) benchmarks/bench_core.py

bench-quick: $(VENV)/.installed-test
	$(PIP) install -q -e ".[bench]"
	$(PY) benchmarks/bench_core.py --quick

# every performance goal in one table, measured by this run: six benchmarks one after another (~35 min), their
# results in a new temporary directory (benchmarks/results stays as committed); docs/performance.md, "The goals"
bench-goals: $(VENV)/.installed-test
	$(PIP) install -q -e ".[bench]"
	$(PY) benchmarks/bench_goals.py --run

# The server image (docker/Dockerfile) with whichever engine answers: docker, else podman (podman builds in
# docker format, the one that keeps HEALTHCHECK; a docker CLI whose daemon is podman's API counts as podman).
# `make image ENGINE=podman IMAGE=aioenv:dev` to choose. No engine here? Install Docker, or podman and
# podman-compose (docs/deployment.md). Neither target is part of `make test`.
ENGINE ?= $(shell \
	if docker version 2>/dev/null | grep -q 'Podman Engine' && podman version >/dev/null 2>&1; then echo podman; \
	elif docker version >/dev/null 2>&1; then echo docker; \
	elif podman version >/dev/null 2>&1; then echo podman; fi)
IMAGE ?= aioenv:latest
image:
	@test -n "$(ENGINE)" || { echo "make image: no container engine answers (docker version, podman version fail)" >&2; exit 1; }
	$(ENGINE) build $(if $(filter podman,$(ENGINE)),--format docker) -f docker/Dockerfile -t $(IMAGE) .

# builds the image and runs it for real: a remote pool equal to SyncVectorEnv, the health check, compose with
# worker-host replicas, SIGTERM, nothing left running (docker/image_test.py; exit 1 says why)
image-test: $(VENV)/.installed
	@test -n "$(ENGINE)" || { echo "make image-test: no container engine answers (docker version, podman version fail)" >&2; exit 1; }
	$(PY) docker/image_test.py --engine $(ENGINE)

# OpenEnv environments as container images (`openenv+image:`, docs/openenv.md) on a real engine, with whichever
# engine answers (ENGINE, as above): builds the OpenEnv test env
# (tests/support/openenv_app.py) as an image from a local python:3.11-slim (tests/containers/Containerfile; OpenEnv and
# uvicorn from the package registry, or from a wheelhouse downloaded here when the build cannot reach it; the layer
# cache keeps a rebuild to seconds), then runs tests/containers: a pool of envs each in its own container,
# first-finished recv, a container killed mid-episode, a hung step replaced under step_timeout, nothing left after
# close, nothing left after SIGKILL of the client; and docs/openenv.md's "Containers" section as written (its image of
# counter_env.py, built once). Not part of `make test`: its pytest collects tests/containers only
# when AIOENV_TEST_CONTAINERS names the engine, as this target does.
test-containers: $(VENV)/.installed-test
	@test -n "$(ENGINE)" || { echo "make test-containers: no container engine answers (docker version, podman version fail)" >&2; exit 1; }
	$(PY) -m tests.containers.image --engine $(ENGINE)
	AIOENV_TEST_CONTAINERS=$(ENGINE) $(PY) -m pytest tests/containers

clean:
	rm -rf $(VENV) .nox .mypy_cache .ruff_cache .pytest_cache *.egg-info
