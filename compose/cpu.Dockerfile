# The CPU engine image: pdsim, smg (from PyPI) and the Toxiproxy server, on a base image
# given as a build argument so CI can build it with no registry (compose/build.sh makes
# the context: wheels, pdsim's source and the toxiproxy-server binary, then builds with
# `--network none`).
ARG BASE=pybase:ci
FROM ${BASE}
LABEL org.pdchaos.image=cpu
COPY wheels /wheels
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-index --find-links=/wheels --no-cache-dir -r /wheels/requirements.txt \
 && rm -rf /wheels
COPY toxiproxy-server /usr/local/bin/toxiproxy-server
COPY pdsim /app/pdsim
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONPATH=/app
CMD ["python", "-m", "pdsim", "--help"]
