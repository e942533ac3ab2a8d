# Troupe scheduler image: `docker build -t troupe .`
# The runtime dependencies are the versions CI tested: requirements-runtime.lock (the
# runtime part of requirements.lock, written by `make lock`), installed with their
# hashes; then Troupe itself without dependencies, so nothing is resolved at build time
# (its wheel is built by setuptools in pip's isolated build environment, in this stage
# only: nothing of it reaches the image).
# tests/integration/test_image.py replays these install steps in a virtual environment.
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements-runtime.lock ./
RUN pip install --no-cache-dir --prefix=/install --require-hashes --no-deps -r requirements-runtime.lock
COPY pyproject.toml README.md ./
COPY troupe ./troupe
RUN pip install --no-cache-dir --prefix=/install --no-deps .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["troupe"]
CMD ["run"]
