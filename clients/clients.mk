# Targets of the Python and Rust clients (clients/python, clients/rust),
# included by the Makefile. Their toolchains are Debian's packages:
# `make deps-clients` installs them.

# Debian's python3 (not a pyenv or venv one): the python3-* packages below
# install into its dist-packages.
CLIENTS_PYTHON ?= /usr/bin/python3
CARGO          ?= cargo
CLIENTS_DEBS   := python3-grpcio python3-protobuf python3-xxhash python3-pytest \
                  python3-pip python3-setuptools python3-venv \
                  protobuf-compiler protobuf-compiler-grpc librust-xxhash-rust-dev
PY_CLIENT      := clients/python
RUST_CLIENT    := clients/rust

.PHONY: deps-clients proto-python test-python python-install-check test-rust test-clients-if-present bench-clients

## deps-clients: Debian packages of the Python client (grpcio, protobuf, xxhash, pytest, protoc + its gRPC Python plugin) and the Rust crate (xxhash-rust; cargo when missing)
deps-clients:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CLIENTS_DEBS)
	@command -v $(CARGO) >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo

## proto-python: regenerate the committed Python message and service code from api/inferencecache/v1/inferencecache.proto
proto-python:
	@command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq protobuf-compiler protobuf-compiler-grpc)
	protoc -I inference_cache/v1=api/inferencecache/v1 --python_out=$(PY_CLIENT) --grpc_python_out=$(PY_CLIENT) \
	  --plugin=protoc-gen-grpc_python=$$(command -v grpc_python_plugin) inference_cache/v1/inferencecache.proto

## test-python: the Python client's tests (golden vectors, picker table, a real 3-node cluster, the three fingerprint commands)
test-python: build
	cd $(PY_CLIENT) && IC_BINARY=$(BIN)/inference-cache CARGO=$(CARGO) $(CLIENTS_PYTHON) -m pytest -q -p no:cacheprovider tests

## python-install-check: `pip install ./clients/python` as its README prints it, offline (--no-index), into a throwaway venv over Debian's packages; then the installed module's fingerprint command, run outside the checkout
python-install-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp" $(PY_CLIENT)/build $(PY_CLIENT)/*.egg-info' EXIT && \
	  $(CLIENTS_PYTHON) -m venv --system-site-packages "$$tmp/venv" && \
	  "$$tmp/venv/bin/pip" install -q --no-index --no-build-isolation --no-deps ./$(PY_CLIENT) && \
	  out=$$(cd "$$tmp" && echo '[1,2,3,4]' | "$$tmp/venv/bin/python" -m inference_cache fingerprint --block-size 2) && \
	  echo "$$out" && test "$$out" = '{"block_size":2,"block_hashes":["10773075109927122010","5890102321129957602"],"block_token_counts":[2,2],"prefix_hash":"5890102321129957602"}'

## test-rust: the Rust fingerprint crate's tests, offline from Debian's cargo registry
test-rust:
	cd $(RUST_CLIENT) && $(CARGO) test --offline --quiet

# test-clients-if-present runs test-python and test-rust when their
# toolchains are installed and says which it skips otherwise (make test);
# with CLIENTS_REQUIRED=1 (CI) a missing toolchain fails instead.
test-clients-if-present:
	@if $(CLIENTS_PYTHON) -c 'import grpc, google.protobuf, xxhash, pytest' 2>/dev/null; then \
	  $(MAKE) --no-print-directory test-python; \
	else echo "== test-python skipped: $(CLIENTS_PYTHON) lacks grpcio, protobuf, xxhash or pytest (make deps-clients installs them)"; [ -z "$(CLIENTS_REQUIRED)" ]; fi
	@if command -v $(CARGO) >/dev/null && [ -d /usr/share/cargo/registry ] && ls /usr/share/cargo/registry | grep -q '^xxhash-rust-'; then \
	  $(MAKE) --no-print-directory test-rust; \
	else echo "== test-rust skipped: no cargo or no xxhash-rust in /usr/share/cargo/registry (make deps-clients installs them)"; [ -z "$(CLIENTS_REQUIRED)" ]; fi

## bench-clients: Python fingerprint throughput and lookup latency beside the Go SDK's, one 3-node cluster (BENCHMARKS.md)
bench-clients: build
	$(CLIENTS_PYTHON) $(PY_CLIENT)/bench/bench_clients.py --runs 5
