# A stand-in for the official Paddle image, made by `make docker-check` (tools/docker_check.py) where no image
# registry is reachable: Debian's Python with Paddle's CPU wheel as the image's paddle, and pip pointed at a
# wheelhouse made on the host (the build context) in place of the package index. docker/Dockerfile builds on it
# with --build-arg PADDLE_IMAGE=<this image> --build-arg PADDLE_DEVICE=cpu.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ARG PADDLE_VERSION
COPY . /wheelhouse
# like the official image: `python` and `pip` are the environment that holds paddle
ENV PATH=/opt/paddle/bin:$PATH PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/paddle && pip install --no-cache-dir "paddlepaddle==${PADDLE_VERSION}"
