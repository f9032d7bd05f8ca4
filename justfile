# treemail tasks. Every recipe uses the project's virtualenv when there is one.
python := if path_exists(".venv/bin/python") == "true" { ".venv/bin/python" } else { "python3" }

# List the recipes.
default:
    @just --list

# The demo: a delegation tree exchanging mail on the embedded LMDB store.
demo *ARGS:
    {{python}} -m treemail demo {{ARGS}}

# Everything CI runs: lint, strict types, and the fast test suite (ci Hypothesis profile).
test: lint
    {{python}} -m pytest tests --ignore=tests/deep

# ruff and mypy --strict.
lint:
    {{python}} -m ruff check treemail tests bench
    {{python}} -m mypy --strict treemail

# The bounded exhaustive model checker at its default bounds.
check *ARGS:
    {{python}} -m treemail check {{ARGS}}

# Long runs: the deep Hypothesis profile and the long crash campaign.
deep:
    HYPOTHESIS_PROFILE=deep {{python}} -m pytest tests/deep tests/property -q

# Throughput and memory, as ratios against a baseline measured in the same run.
bench *ARGS:
    {{python}} -m bench {{ARGS}}
