# Adding rankvisor to your own PyTorch training image (not built here: it needs a base image from a
# registry). The static binary has no runtime dependency, so it runs in any Linux image.
#
#   bash images/build.sh                               # builds rankvisor:dev (holds /rankvisor)
#   docker build -f images/pytorch.Dockerfile \
#     --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime -t my-training-image .
#
# Then, in the PyTorchJob (examples/k8s/pytorchjob.yaml):
#   command: ["/rankvisor", "--restart-policy", "OnFailure", "--"]
#   args: ["torchrun", "--nproc-per-node", "8", "train.py"]
# or keep the image's own command and only set the ENTRYPOINT below.
ARG BASE=pytorch/pytorch:latest
ARG RANKVISOR_IMAGE=rankvisor:dev

FROM ${RANKVISOR_IMAGE} AS rankvisor

FROM ${BASE}
COPY --from=rankvisor /rankvisor /rankvisor
# rankvisor's HTTP endpoint: probes and Prometheus (/healthz /readyz /metrics /status).
EXPOSE 9400
# PID 1 is rankvisor; CMD (the image's or the pod's args) is the training command.
ENTRYPOINT ["/rankvisor", "--"]
CMD ["python", "train.py"]
