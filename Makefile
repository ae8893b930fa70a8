# The two commands of the README: `make demo` runs the product, `make test` runs the tests.
.PHONY: bootstrap demo test down status notebooks

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@.venv/bin/trends demo

test: bootstrap
	@.venv/bin/pytest

down:
	@.venv/bin/trends down

status:
	@.venv/bin/trends status

notebooks: bootstrap
	@.venv/bin/jupyter lab --ip 127.0.0.1 --no-browser --notebook-dir notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)
