# zerolab on GPUs: the pinned training stack and the zerolab code, one image.
# Why this base, and what was verified how: docs/compatibility.md.
#
#   docker build -t zerolab:gpu .
#   docker run --rm --gpus all --ipc=host zerolab:gpu zerolab doctor
#
# Layers go from what changes least to what changes most: the base image, the engine's
# pinned Python packages (from zerolab/engine/pins.toml), apex, Megatron-DeepSpeed at the
# pinned commit with its compiled helpers and kernels, and last the zerolab code and recipes.
# Editing a recipe or zerolab's code rebuilds only the last layers. apex, the helpers and
# the kernels are built by the same commands as `make setup` (python -m zerolab.engine.build).

# NGC PyTorch 25.06: PyTorch 2.8.0a0+5228986c39, CUDA 12.9.1, NCCL 2.27.3, Python 3.12,
# apex. Pinned by tag and by the digest of its multi-architecture index. To move to
# another release, read its digest with
#   docker buildx imagetools inspect nvcr.io/nvidia/pytorch:YY.MM-py3
# and update docs/compatibility.md with it.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.06-py3@sha256:025d9b102b5436d4af8af58f12c6a46b7e5d16f19543b1d2cc4446bf2650b4f1
FROM ${BASE_IMAGE}
ARG BASE_IMAGE

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# ZEROLAB_IMAGE names the base image: `zerolab doctor` reports it and takes the packages
# of zerolab.engine.container.BASE_IMAGE_PACKAGES (torch) from it rather than from pins.toml.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    ZEROLAB_IMAGE=${BASE_IMAGE}

# pdsh: the deepspeed launcher's default way to start ranks on the hosts of a hostfile.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends pdsh \
    && rm -rf /var/lib/apt/lists/*

# The engine's Python packages, exactly as pinned in pins.toml, less torch (the base
# image's build, which apex is compiled against), and zerolab's dependencies at the versions of
# its lock (requirements/zerolab.txt, `make lock`). NGC's pip constraint file pins the
# packages it ships; the constraints on the packages pinned here are dropped, as NVIDIA's
# release notes say to do when overriding one.
COPY zerolab/__init__.py /opt/zerolab-pins/zerolab/
COPY zerolab/engine/__init__.py zerolab/engine/container.py zerolab/engine/pins.py zerolab/engine/pins.toml /opt/zerolab-pins/zerolab/engine/
COPY requirements/zerolab.txt /opt/zerolab-pins/requirements-zerolab.txt
WORKDIR /opt/zerolab-pins
RUN PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container requirements requirements-engine.txt \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container relax-constraints \
        /etc/pip/constraint.txt requirements-engine.txt requirements-zerolab.txt

# DeepSpeed is built from source against the image's torch, with the CUDA ops the
# recipes use compiled now so that no run compiles at start: cpu_adam (the optimizer of
# ZeRO-Offload, gpt2_z3_offload) and fused_adam (DeepSpeed's own Adam). Nothing else a
# recipe runs loads an op. The build has no GPU: DS_ACCELERATOR=cuda stops DeepSpeed from
# falling back to its CPU accelerator, and TORCH_CUDA_ARCH_LIST names the GPUs to build for
# (A100 8.0, A10/A40/RTX 30 8.6, L4/L40 8.9, H100/H200 9.0, newer through PTX).
ARG TORCH_CUDA_ARCH_LIST="8.0 8.6 8.9 9.0+PTX"
ARG MAX_JOBS=8
RUN DS_ACCELERATOR=cuda DS_BUILD_OPS=0 DS_BUILD_CPU_ADAM=1 DS_BUILD_FUSED_ADAM=1 \
    TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" \
    python3 -m pip install --no-build-isolation -r requirements-engine.txt -r requirements-zerolab.txt \
    && DS_ACCELERATOR=cuda PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container check-deepspeed-ops cpu_adam fused_adam \
    && python3 -m pip freeze > /opt/zerolab-pins/pip-freeze.txt

# zerolab's build steps for the engine (standard library only), shared with `make setup`.
COPY zerolab/contracts.py zerolab/errors.py zerolab/locations.py /opt/zerolab-pins/zerolab/
COPY zerolab/logs/__init__.py zerolab/logs/signals.py /opt/zerolab-pins/zerolab/logs/
COPY zerolab/engine/apex.py zerolab/engine/build.py zerolab/engine/checkout.py zerolab/engine/cuda.py \
     zerolab/engine/data_helpers.py zerolab/engine/fused_kernels.py zerolab/engine/paths.py \
     /opt/zerolab-pins/zerolab/engine/
COPY zerolab/rank/__init__.py zerolab/rank/import_hooks.py zerolab/rank/nvcc.py zerolab/rank/prebuild_kernels.py \
     zerolab/rank/sample_index_check.py zerolab/rank/workarounds.py \
     /opt/zerolab-pins/zerolab/rank/

# apex: Megatron-DeepSpeed imports apex's fused layer norm, FusedAdam and gradient-accumulation
# fusion on CUDA (the apex package and amp_C, fused_layer_norm_cuda,
# fused_weight_gradient_mlp_cuda). The base image ships NVIDIA's build with all three, so
# this step finds them and builds nothing; on a base without them it builds exactly those
# from pins.toml's apex commit, for TORCH_CUDA_ARCH_LIST.
RUN TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" PYTHONPATH=/opt/zerolab-pins \
    python3 -m zerolab.engine.build apex --workdir /tmp/zerolab-apex \
    && rm -rf /tmp/zerolab-apex

# The launchers and the interpreter in one bin directory: `zerolab launch` runs
# torchrun and deepspeed from the directory of ZEROLAB_ENGINE_PYTHON.
RUN for tool in python3 torchrun deepspeed; do \
        if [ ! -x "/usr/local/bin/${tool}" ]; then ln -s "$(command -v "${tool}")" "/usr/local/bin/${tool}"; fi; \
    done

# Megatron-DeepSpeed at the pinned commit (must equal pins.toml; the build checks). Its
# dataset helpers (megatron/data/helpers.cpp, then smoke-checked: where they fail, runs use
# the engine's Python sample index) and fused softmax kernels (under the workarounds a run
# applies) are compiled now; a run finds them up to date. The tree stays writable by any user: Megatron re-checks
# both builds at start and takes a lock file in the build directory. Its .git stays, so
# that `zerolab doctor` can read the commit (safe.directory: any user may).
ARG ENGINE_REPO=https://github.com/deepspeedai/Megatron-DeepSpeed.git
ARG ENGINE_COMMIT=4efb479d5317ce9b86096b9d8e3e8030b0b5263b
ENV ZEROLAB_ENGINE_DIR=/opt/Megatron-DeepSpeed \
    ZEROLAB_ENGINE_PYTHON=/usr/local/bin/python3
WORKDIR /opt/Megatron-DeepSpeed
RUN PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container check-engine "${ENGINE_REPO}" "${ENGINE_COMMIT}" \
    && git init --quiet . \
    && git fetch --quiet --depth 1 "${ENGINE_REPO}" "${ENGINE_COMMIT}" \
    && git -c advice.detachedHead=false checkout --quiet FETCH_HEAD \
    && git config --system --add safe.directory /opt/Megatron-DeepSpeed \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.build data-helpers . \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.build fused-kernels . \
    && chmod -R a+rwX /opt/Megatron-DeepSpeed

# The runtime user. Ubuntu 24.04 images carry a user `ubuntu` with uid 1000; it makes way
# for `zerolab`. `docker run --user $(id -u)` works too: the entrypoint gives a user
# without a home directory a writable one.
ARG ZEROLAB_UID=1000
RUN if id -u ubuntu > /dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid "${ZEROLAB_UID}" --shell /bin/bash zerolab

# zerolab itself, last. logs/ and data/ are volumes, writable by any user.
WORKDIR /workspace/zerolab
COPY --chown=zerolab:zerolab . /workspace/zerolab
RUN python3 -m pip install --no-deps --no-build-isolation -e . \
    && mkdir -p logs data \
    && chmod 1777 logs data \
    && install -m 0755 docker/entrypoint.sh /usr/local/bin/zerolab-entrypoint

LABEL org.opencontainers.image.title="zerolab" \
      org.opencontainers.image.description="GPT-2 on Megatron-DeepSpeed: what each ZeRO and parallelism setup costs and buys" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.zerolab.engine.commit="${ENGINE_COMMIT}"

VOLUME ["/workspace/zerolab/logs", "/workspace/zerolab/data"]
USER ${ZEROLAB_UID}
ENTRYPOINT ["/usr/local/bin/zerolab-entrypoint"]
CMD ["zerolab", "--help"]
