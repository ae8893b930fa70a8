# The two commands of the README: `make demo` runs the product, `make test` runs the tests.
.PHONY: bootstrap demo test down status notebooks

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@.venv/bin/trends demo

# Lint first (seconds), then the whole suite on .venv's Python 3.11, then the unit suite on 3.12 and 3.13.
test: bootstrap
	@.venv/bin/ruff check .
	@.venv/bin/pytest
	@bash scripts/unit-other-pythons.sh

down:
	@.venv/bin/trends down

status:
	@.venv/bin/trends status

notebooks: bootstrap
	@TRENDS_HOME=$${TRENDS_HOME:-$(CURDIR)/var} .venv/bin/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)
