# Stand-in for Cozystack's hack/common-envs.mk, for make test-packages: the variables and macros a
# package Makefile uses in its image targets, with local defaults (nothing here pushes anything).
REGISTRY ?= ghcr.io/cozystack/cozystack
CACHE_REGISTRY ?= $(REGISTRY)
IMAGE_TAG ?= dev
PUSH := 0
LOAD := 0
OCI_EXPORT_DIR ?=
BUILDX_ARGS := --provenance=false --push=$(PUSH) --load=$(LOAD)
comma := ,
oci-output = $(if $(strip $(OCI_EXPORT_DIR)), --output type=oci$(comma)dest=$(OCI_EXPORT_DIR)/$(subst /,-,$(1)).oci.tar)
define image-tags
--tag $(REGISTRY)/$(1):$(IMAGE_TAG)$(call oci-output,$(1))
endef
cache-args = --cache-from type=registry,ref=$(CACHE_REGISTRY)/$(1):$(if $(2),$(2),buildcache)
