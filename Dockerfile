# zerolab on GPUs: the pinned training stack and the zerolab code, one image.
# Why this base, and what was verified how: docs/compatibility.md.
#
#   docker build -t zerolab:gpu .
#   docker run --rm --gpus all --ipc=host zerolab:gpu zerolab doctor
#
# Its CPU twin is this file with two build arguments: BASE_IMAGE, the stand-in base that
# docker/cpu-base.sh makes from Debian's packages and the CPU torch, and ACCELERATOR=cpu, which
# builds DeepSpeed's CPU ops and leaves out the CUDA-only steps (apex, the fused kernels).
# `make test-container` builds it and trains in it (tests/container/; README, "The image").
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
# cuda: the GPU image. cpu: its CPU twin (on a base with a CPU torch, python3-dev, a compiler, git).
ARG ACCELERATOR=cuda

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
# image's build, which apex is compiled against), what they need at the versions of the engine's
# lock (requirements/engine.txt, the constraints of `make setup`'s pip too), and zerolab's
# dependencies at the versions of its lock (requirements/zerolab.txt, `make lock`). NGC's pip
# constraint file pins the packages it ships; the constraints on the packages pinned here are
# dropped, as NVIDIA's release notes say to do when overriding one.
COPY zerolab/__init__.py zerolab/locations.py /opt/zerolab-pins/zerolab/
COPY zerolab/engine/__init__.py zerolab/engine/container.py zerolab/engine/locks.py zerolab/engine/pins.py \
     zerolab/engine/pins.toml /opt/zerolab-pins/zerolab/engine/
COPY requirements/engine.txt requirements/zerolab.txt /opt/zerolab-pins/requirements/
WORKDIR /opt/zerolab-pins
RUN PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container requirements requirements-engine.txt \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container constraints constraints-engine.txt \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container relax-constraints \
        /etc/pip/constraint.txt requirements-engine.txt constraints-engine.txt requirements/zerolab.txt

# DeepSpeed is built from source against the image's torch, with the ops the recipes load on
# ACCELERATOR compiled now so that no run compiles at start (zerolab.engine.container's
# DEEPSPEED_OPS): on cuda cpu_adam (the optimizer of ZeRO-Offload, gpt2_z3_offload) and
# fused_adam (DeepSpeed's own Adam), on cpu cpu_adam and deepspeed_shm_comm (the ranks'
# shared-memory collectives). Nothing else a recipe runs loads an op. The build has no GPU:
# DS_ACCELERATOR keeps DeepSpeed from choosing by what it sees, and TORCH_CUDA_ARCH_LIST names
# the GPUs to build for (A100 8.0, A10/A40/RTX 30 8.6, L4/L40 8.9, H100/H200 9.0, newer through PTX).
ARG TORCH_CUDA_ARCH_LIST="8.0 8.6 8.9 9.0+PTX"
ARG MAX_JOBS=8
RUN TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" PYTHONPATH=/opt/zerolab-pins \
    python3 -m zerolab.engine.container with-deepspeed-ops "${ACCELERATOR}" \
    python3 -m pip install --no-build-isolation -r requirements-engine.txt -r requirements/zerolab.txt \
        -c constraints-engine.txt \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container check-deepspeed-ops "${ACCELERATOR}" \
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
# from pins.toml's apex commit, for TORCH_CUDA_ARCH_LIST. CUDA only: on CPU a launch gives the
# engine zerolab's torch stand-ins for apex.
RUN if [ "${ACCELERATOR}" = cuda ]; then \
        TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST}" MAX_JOBS="${MAX_JOBS}" PYTHONPATH=/opt/zerolab-pins \
        python3 -m zerolab.engine.build apex --workdir /tmp/zerolab-apex \
        && rm -rf /tmp/zerolab-apex; \
    fi

# The launchers and the interpreter in one bin directory: `zerolab launch` runs
# torchrun and deepspeed from the directory of ZEROLAB_ENGINE_PYTHON.
RUN for tool in python3 torchrun deepspeed; do \
        if [ ! -x "/usr/local/bin/${tool}" ]; then ln -s "$(command -v "${tool}")" "/usr/local/bin/${tool}"; fi; \
    done

# Megatron-DeepSpeed at the pinned commit (must equal pins.toml; the build checks), fetched
# from ENGINE_SRC: the pinned upstream unless the build names a local git directory it mounts
# (`podman build -v DIR:/mnt/engine-src:ro --build-arg ENGINE_SRC=/mnt/engine-src`, as
# ZEROLAB_ENGINE_SRC does for `make setup`). Its dataset helpers (megatron/data/helpers.cpp;
# smoke-checked against the image's zerolab below) and, on CUDA, its fused softmax kernels
# (under the workarounds a run applies) are compiled now; a run finds them up to date. The
# tree stays writable by any user: Megatron re-checks both builds at start and takes a lock
# file in the build directory. Its .git stays, so that `zerolab doctor` can read the commit
# (safe.directory: any user may).
ARG ENGINE_REPO=https://github.com/deepspeedai/Megatron-DeepSpeed.git
ARG ENGINE_COMMIT=4efb479d5317ce9b86096b9d8e3e8030b0b5263b
ARG ENGINE_SRC=${ENGINE_REPO}
ENV ZEROLAB_ENGINE_DIR=/opt/Megatron-DeepSpeed \
    ZEROLAB_ENGINE_PYTHON=/usr/local/bin/python3
WORKDIR /opt/Megatron-DeepSpeed
RUN PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.container check-engine "${ENGINE_REPO}" "${ENGINE_COMMIT}" \
    && git init --quiet . \
    && git fetch --quiet --depth 1 "${ENGINE_SRC}" "${ENGINE_COMMIT}" \
    && git -c advice.detachedHead=false checkout --quiet FETCH_HEAD \
    && git config --system --add safe.directory /opt/Megatron-DeepSpeed \
    && PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.build data-helpers . \
    && if [ "${ACCELERATOR}" = cuda ]; then PYTHONPATH=/opt/zerolab-pins python3 -m zerolab.engine.build fused-kernels .; fi \
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

# The dataset helpers answer build_sample_idx correctly, called by the image's zerolab as every
# launch's check calls them; the build fails where they do not (a broken image is not shipped
# with the Python fallback silently in its place).
RUN python3 -m zerolab.engine.build check-data-helpers /opt/Megatron-DeepSpeed

LABEL org.opencontainers.image.title="zerolab" \
      org.opencontainers.image.description="GPT-2 on Megatron-DeepSpeed: what each ZeRO and parallelism setup costs and buys" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.zerolab.engine.commit="${ENGINE_COMMIT}"

VOLUME ["/workspace/zerolab/logs", "/workspace/zerolab/data"]
USER ${ZEROLAB_UID}
ENTRYPOINT ["/usr/local/bin/zerolab-entrypoint"]
CMD ["zerolab", "--help"]
