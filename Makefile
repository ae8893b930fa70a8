# The two commands of the README: `make demo` runs the product, `make test` runs the tests.
.PHONY: bootstrap demo test down status

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
