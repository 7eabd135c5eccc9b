# Stand-in for Cozystack's hack/package.mk, for make test-packages: its help target (the default
# goal) and the NAME/NAMESPACE check its release targets run first.
.DEFAULT_GOAL=help
.PHONY: help check

help:
	@grep -hE '^[a-zA-Z_-]+:' $(MAKEFILE_LIST) | cut -d: -f1

check:
	@if [ -z "$(NAME)" ]; then echo "env NAME is not set!" >&2; exit 1; fi
	@if [ -z "$(NAMESPACE)" ]; then echo "env NAMESPACE is not set!" >&2; exit 1; fi
