# Corium Fleet — the two commands a fresh machine needs:
#   make run    builds and runs a local fleet on loopback
#   make test   installs what the tests need, builds the previous release's binaries (the upgrade
#               test's starting point), starts PostgreSQL and SeaweedFS (S3), runs every test
# Others: make bench, make soak, make differential, make lint, make fmt, make chart-test, make images, make clean-run,
# make patch (the Corium patches every target that builds applies first: patches/README.md).

SHELL := /bin/bash
CARGO ?= cargo
WORK ?= $(CURDIR)/target/ci-services
PG_PORT ?= 54329
export PG_PORT

## Each stage of make test prints its duration as it ends (and appends it to target/stages.log).
STAGE := bash scripts/stage.sh

.PHONY: run test bench soak differential lint fmt tools chart-test clean-run images patch

## The Corium patches (patches/README.md): our own diffs applied to the pristine crates.io crates
## into target/corium-patched/, which the workspace's [patch.crates-io] names. A no-op when current.
patch:
	@$(STAGE) patch bash scripts/corium-patch.sh apply

run: patch
	$(CARGO) build --bins
	$(CARGO) run --quiet --bin corium-fleet -- dev

## Tools the test run needs that a fresh machine may lack (Debian 12+ or Ubuntu 24.04+, as root or
## through sudo; nothing is installed when everything is there): scripts/install-tools.sh.
tools:
	@$(STAGE) tools bash scripts/install-tools.sh

## Three things at once, then the rest in order: the chart checks (helm and pytest, one core), the
## previous release's build (the upgrade test's starting point), and the lint followed by the stock
## CLI's build. Two rustc builds side by side fill each other's single-threaded phases (a large
## crate's front end). The two in the background write target/chart-test.log and
## target/previous-release.log, printed whole if they fail.
test: tools patch
	@mkdir -p target; \
	  $(STAGE) chart-test bash scripts/chart-test.sh >target/chart-test.log 2>&1 & chart=$$!; \
	  $(STAGE) previous-release bash scripts/previous-release.sh >target/previous-release.log 2>&1 & previous=$$!; \
	  $(MAKE) --no-print-directory lint target/stock/bin/corium; built=$$?; \
	  wait $$chart; charts=$$?; wait $$previous; previous=$$?; \
	  if [ $$charts = 0 ]; then tail -n 2 target/chart-test.log; else cat target/chart-test.log; fi; \
	  if [ $$previous != 0 ]; then cat target/previous-release.log; fi; \
	  [ $$built = 0 ] && [ $$charts = 0 ] && [ $$previous = 0 ]
	$(STAGE) corium-patch-tests bash scripts/corium-patch.sh test
	$(STAGE) build $(CARGO) build --workspace --all-targets
	@url=$$(scripts/postgres.sh start $(WORK)/pg) && \
	  trap 'scripts/postgres.sh stop $(WORK)/pg; scripts/seaweedfs.sh stop $(WORK)/s3' EXIT && \
	  s3=$$(scripts/seaweedfs.sh start $(WORK)/s3) && \
	  CORIUM_FLEET_TEST_PG_URL=$$url CORIUM_FLEET_TEST_S3_ENDPOINT=$$s3 $(STAGE) nextest $(CARGO) nextest run --workspace --no-fail-fast

## Long-run fault suite (never part of `make test`): SOAK_SEEDS simulation
## seeds (default 2000, from SOAK_FIRST_SEED) and the process tier over
## SOAK_PROCESS_SEEDS (comma-separated). Every failing seed prints its plan and
## the command that replays it; see docs/testing.md.
SOAK_SEEDS ?= 2000
SOAK_FIRST_SEED ?= 100
SOAK_PROCESS_SEEDS ?= 1,2,3,4,5,6,7,8,9,10
soak: tools patch
	$(CARGO) build --workspace --all-targets
	@url=$$(scripts/postgres.sh start $(WORK)/pg-soak) && \
	  trap 'scripts/postgres.sh stop $(WORK)/pg-soak; scripts/seaweedfs.sh stop $(WORK)/s3-soak' EXIT && \
	  s3=$$(scripts/seaweedfs.sh start $(WORK)/s3-soak) && \
	  CORIUM_FLEET_TEST_PG_URL=$$url CORIUM_FLEET_TEST_S3_ENDPOINT=$$s3 CORIUM_FLEET_SIM_SEEDS=$(SOAK_SEEDS) CORIUM_FLEET_SIM_FIRST_SEED=$(SOAK_FIRST_SEED) \
	  CORIUM_FLEET_FAULT_SEEDS=$(SOAK_PROCESS_SEEDS) \
	  $(CARGO) nextest run -p corium-fleet-tests --test simulation --test faults --no-fail-fast --no-capture \
	    --test-threads 1

## A long run of generated differential sequences against a stock Corium
## transactor (never part of `make test`, which runs 4): DIFF_SEEDS seeds
## (default 500) from DIFF_FIRST_SEED, DIFF_LENGTH calls each; a failing seed
## prints its shrunk sequence and the command that replays it.
DIFF_SEEDS ?= 500
DIFF_FIRST_SEED ?= 1000
DIFF_LENGTH ?= 60
differential: tools patch target/stock/bin/corium
	$(CARGO) build --workspace --bins
	CORIUM_FLEET_DIFF_SEEDS=$(DIFF_SEEDS) CORIUM_FLEET_DIFF_FIRST_SEED=$(DIFF_FIRST_SEED) CORIUM_FLEET_DIFF_LENGTH=$(DIFF_LENGTH) \
	  $(CARGO) nextest run --profile long -p corium-fleet-tests --test differential generated --no-capture

## Benchmarks: release build, PostgreSQL on loopback, every scenario against its
## baseline in one run; tables on stdout, JSON under target/bench/. Never part
## of `make test`. BENCH_ARGS=--quick for a smoke run. The ingress's
## user-space instructions per forwarded call must stay within
## INSTRUCTION_BUDGET (scripts/bench/instructions.sh; design note 0018): work
## added to every call raises it in the same change, with the count.
INSTRUCTION_BUDGET ?= 122000

## The stock Corium transactor (crates.io) the differential tests and the
## scaling benchmark compare with: built once per machine (about 17 minutes on two cores) into
## STOCK_CACHE, outside target/ and keyed by its version, so a fresh clone or a cleaned target
## copies it; target/stock/bin/corium is that copy.
STOCK_VERSION := 0.1.90
STOCK_CACHE ?= $(HOME)/.cache/corium-fleet/corium-cli-$(STOCK_VERSION)
target/stock/bin/corium:
	@if [ ! -x $(STOCK_CACHE)/bin/corium ]; then mkdir -p $(dir $(STOCK_CACHE)) && \
	  $(STAGE) stock-cli $(CARGO) install corium-cli --version =$(STOCK_VERSION) --locked --root $(STOCK_CACHE).partial \
	    --target-dir $(CURDIR)/target/stock-build && rm -rf $(STOCK_CACHE) && mv $(STOCK_CACHE).partial $(STOCK_CACHE); \
	  status=$$?; rm -rf $(CURDIR)/target/stock-build; exit $$status; fi
	mkdir -p target/stock/bin && cp $(STOCK_CACHE)/bin/corium target/stock/bin/corium

bench: tools patch target/stock/bin/corium
	@bash scripts/previous-release.sh --release >/dev/null
	$(CARGO) build --release --bins
	@url=$$(scripts/postgres.sh start $(WORK)/pg-bench) && \
	  trap 'scripts/postgres.sh stop $(WORK)/pg-bench; scripts/seaweedfs.sh stop $(WORK)/s3-bench' EXIT && \
	  s3=$$(scripts/seaweedfs.sh start $(WORK)/s3-bench) && \
	  CORIUM_FLEET_TEST_PG_URL=$$url CORIUM_FLEET_TEST_S3_ENDPOINT=$$s3 target/release/corium-fleet-bench $(BENCH_ARGS) --out target/bench/fleet.json
	@if [ -x scripts/bench/proxies.sh ]; then scripts/bench/proxies.sh --json target/bench/proxies.json $(BENCH_PROXY_ARGS); fi
	@command -v valgrind >/dev/null || { echo "installing valgrind (Debian; the instruction count uses callgrind)"; \
	  apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind >/dev/null; }
	scripts/bench/instructions.sh --budget $(INSTRUCTION_BUDGET)

## Helm chart: lint, render, schema-validate (Kubernetes 1.29 and 1.33), rendered-manifest tests.
chart-test:
	@$(STAGE) chart-test bash scripts/chart-test.sh

## The crates' docs name their private modules (for contributors), so they are checked as
## contributors read them: with private items, every link resolving.
lint: patch
	$(CARGO) fmt --all -- --check
	$(STAGE) clippy $(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(STAGE) docs $(CARGO) doc --workspace --no-deps --document-private-items --quiet

fmt:
	$(CARGO) fmt --all

clean-run:
	rm -rf .corium-fleet

## Container images IMAGE_PREFIX/corium-fleet-{transactor,ingress}:IMAGE_TAG (scripts/images.sh).
## With a Docker engine that answers (`docker info`): both targets of docker/Dockerfile (BuildKit);
## push with `docker push` afterwards. Without one: daemonless with buildah (installed if missing),
## FROM scratch with the host's release build and Debian 12 glibc, storage in target/images/containers,
## plus target/images/corium-fleet-{transactor,ingress}.oci.tar; each image is run and checked.
## IMAGE_BUILDER=docker|buildah forces one path.
IMAGE_PREFIX ?= corium-fleet
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
images: patch
	IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(IMAGE_TAG) bash scripts/images.sh
