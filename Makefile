# memwal-jobs. The README's two commands: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_DIR ?= .demo

.PHONY: install test demo bench proto lint clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[spark,airflow,test]"
	@# The build leaves an egg-info beside the sources; with the repo root on sys.path
	@# (pytest) Airflow would then see memwal-jobs twice and register its plugin twice.
	@rm -rf memwal_jobs.egg-info
	@touch $(STAMP)

install: $(STAMP)

proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. proto/memwal/pb/*.proto

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check memwal jobs dags airflow_plugins tests bench

SPARK_SUBMIT := PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) $(VENV)/bin/spark-submit \
	--master local[2] --conf spark.ui.enabled=false \
	--driver-java-options -Dlog4j2.configurationFile=$(abspath jobs/log4j2.properties)

# The demo: a table written by pylance's ShardWriter, then the whole maintenance cycle as a
# Spark job in local mode. GC runs with no grace period and expires old versions because
# nothing else reads the demo table; production keeps the defaults (600 s, keep versions).
demo: $(STAMP)
	@rm -rf $(DEMO_DIR)
	$(VENV)/bin/memwal demo-data $(DEMO_DIR)/table
	$(VENV)/bin/memwal status $(DEMO_DIR)/table
	$(SPARK_SUBMIT) jobs/maintenance.py $(DEMO_DIR)/table --grace-seconds 0 --expire-versions 0
	$(VENV)/bin/memwal status $(DEMO_DIR)/table
	$(VENV)/bin/memwal verify $(DEMO_DIR)/table

bench: $(STAMP)
	$(PY) -m bench.run --out bench-results

clean:
	rm -rf $(DEMO_DIR) bench-results
