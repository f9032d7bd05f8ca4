# treemail tasks. Every recipe uses the project's virtualenv when there is one.
python := if path_exists(".venv/bin/python") == "true" { ".venv/bin/python" } else { "python3" }

# List the recipes.
default:
    @just --list

# The demo: a delegation tree exchanging mail on the embedded LMDB store.
demo *ARGS:
    {{python}} -m treemail demo {{ARGS}}

# Everything CI runs: lint, strict types, the bindings check, and the fast test suite, spread
# over one pytest-xdist worker per core (every test owns its temp dirs, sockets and ports).
test: postgres lint check-bindings
    {{python}} -m pytest tests --ignore=tests/deep -n auto --dist worksteal

# The PostgreSQL store's tests start a throwaway PostgreSQL 15 server (initdb, pg_ctl as the
# postgres user): its binaries come from Debian's package, installed here when missing and
# root may install it; otherwise those tests fail, saying what to install.
postgres:
    #!/usr/bin/env bash
    set -euo pipefail
    [ -x /usr/lib/postgresql/15/bin/initdb ] && exit 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing Debian's postgresql for the PostgreSQL store's tests"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "PostgreSQL 15 is missing: its store's tests will fail; run 'sudo apt-get install postgresql'" >&2
    fi

# ruff, and mypy --strict over the package, the benchmarks and the tests (tests are code too).
lint:
    {{python}} -m ruff check treemail tests bench
    {{python}} -m mypy --strict treemail bench tests

# spec/bindings against the wire types: regenerated and diffed, every difference from the
# version's pinned snapshot classified (breaking fails; additive must be in
# spec/protocol-changelog.md), and the TypeScript type-checked with what a client relies on
# (tools/bindings/usage.ts; typescript installed from the npm registry into
# tools/bindings/node_modules on first use, pinned by its package-lock.json).
check-bindings:
    {{python}} -m treemail.adapters.daemon.bindings check
    cd tools/bindings && { [ -x node_modules/.bin/tsc ] || npm ci --silent --no-audit --no-fund; }
    tools/bindings/node_modules/.bin/tsc --noEmit --strict spec/bindings/protocol.ts tools/bindings/usage.ts

# Rewrite spec/bindings from the wire types (after bumping PROTOCOL_VERSION, which pins the
# new version; --amend re-pins the current one while it is unreleased).
write-bindings *ARGS:
    {{python}} -m treemail.adapters.daemon.bindings write {{ARGS}}

# Regenerate everything derived under spec/: the tables (errors, events, config, lifecycles)
# and the bindings (ARGS: --amend to re-pin the unreleased version).
spec *ARGS:
    {{python}} -m treemail.spec_tables
    {{python}} -m treemail.adapters.daemon.bindings write {{ARGS}}

# The bounded exhaustive model checker at its default bounds.
check *ARGS:
    {{python}} -m treemail check {{ARGS}}

# Long runs: the deep Hypothesis profile and the long crash campaign.
deep:
    HYPOTHESIS_PROFILE=deep {{python}} -m pytest tests/deep tests/property -q

# The differential suite on PostgreSQL at the whole ci profile (`just test` runs a quarter of
# it, and an eighth with group commit: the whole one takes minutes, every step a round trip).
diff-pg:
    HYPOTHESIS_PROFILE=ci TREEMAIL_PG_DIFF_FULL=1 {{python}} -m pytest tests/property/test_differential_postgres.py -q -p no:randomly

# SIGKILLs under mixed load: KILLS (default 500) of an engine worker and as many of the daemon,
# each followed by the no-loss, no-duplicate and caps checks (tests/crash/harness.py).
soak KILLS="500":
    TREEMAIL_KILLS={{KILLS}} {{python}} -m pytest tests/deep/test_soak.py -q -s

# Long fuzz runs of every hostile-input surface (tests/fuzz): EXAMPLES per test at the deep
# profile (2500 by default), surfaces that start a runtime or a server scaled down alike; the
# inputs each surface tried and how each ended are printed at the end.
fuzz EXAMPLES="2500":
    HYPOTHESIS_PROFILE=deep TREEMAIL_EXAMPLES={{EXAMPLES}} {{python}} -m pytest tests/fuzz -q

# Throughput and memory, as ratios against a baseline measured in the same run. The bench
# extra (persist-queue, the baseline beside us; cattrs; pyinstrument) is installed first if
# the environment lacks it, so that the README's set-up is all a fresh clone needs.
bench *ARGS:
    @{{python}} -c "import persistqueue, cattrs, pyinstrument" 2>/dev/null || {{python}} -m pip install -q -e '.[bench]'
    {{python}} -m bench {{ARGS}}

# Mutation testing with mutmut (fresh run, one worker): survivors and kill rate, of PACKAGE:
# core (treemail/core, the settings in pyproject.toml [tool.mutmut]), store (the LMDB store,
# adapters/store/lmdb_*, codec, durability, verify) or writer (adapters/runtime/writer.py),
# each judged by the fast tests of its own (tools/mutate/run.py names them), each test of an
# adapter's run bounded by a deadline (tools/mutate/deadline.py: TREEMAIL_MUTATE_DEADLINE
# seconds, 10 by default); GLOBS (mutant names) narrow it to part of the package. Assumes the
# dev extras. Results: docs/mutation.md.
mutate PACKAGE="core" *GLOBS:
    {{python}} tools/mutate/run.py {{PACKAGE}} {{GLOBS}}
