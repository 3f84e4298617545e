# gangsat's container image.
#   docker build -t gangsat:0.1.0 .
#   docker run --rm gangsat:0.1.0 version
# Dependencies come from pyproject.toml (the project's own version ranges); nothing is
# compiled: every dependency ships a manylinux wheel. The final stage has the virtual
# environment and the Python runtime only, and runs as uid/gid 65532.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: gangsat and its dependencies into a virtual environment ---------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/gangsat

# Sources only (see .dockerignore): the package data (scenarios, traces) is under adapter/.
COPY pyproject.toml README.md LICENSE ./
COPY solver/ solver/
COPY adapter/ adapter/
COPY benchmarks/ benchmarks/

# A non-editable install: the wheel built from pyproject.toml, then its dependencies.
# Bytecode is compiled here because the root filesystem is read-only at run time; pip and
# setuptools leave the environment afterwards (nothing installs at run time).
RUN /opt/gangsat/bin/pip install --no-compile . \
    && /opt/gangsat/bin/python -m compileall -q /opt/gangsat/lib \
    && /opt/gangsat/bin/pip uninstall --yes pip setuptools \
    && /opt/gangsat/bin/gangsat version

# --- run ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="gangsat" \
      org.opencontainers.image.description="Kubernetes gang scheduler: every cycle an exact CP-SAT optimisation" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 65532 gangsat \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin gangsat

COPY --from=build /opt/gangsat /opt/gangsat

ENV PATH=/opt/gangsat/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

USER 65532:65532
WORKDIR /tmp
EXPOSE 8080

ENTRYPOINT ["gangsat"]
CMD ["--help"]
