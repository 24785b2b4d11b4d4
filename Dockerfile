# The StreamForge Web image used by compose.yaml for web, worker, beat (and, later, dlq-ingest).
# Stage 1 fetches Spark's Kafka connector with the same pom devstack uses; stage 2 is the application.
FROM maven:3.9-eclipse-temurin-17 AS connector
COPY devstack/maven /maven
RUN mvn -q -B -s /maven/settings.xml -f /maven/spark-kafka.xml dependency:copy-dependencies \
      -DoutputDirectory=/opt/spark-kafka -DincludeScope=runtime \
      -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 streamforge
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir /app
COPY --from=connector /opt/spark-kafka /opt/spark-kafka
ENV STREAMFORGE_SPARK_JARS=/opt/spark-kafka \
    STREAMFORGE_STATE_DIR=/var/lib/streamforge \
    PYTHONUNBUFFERED=1
RUN mkdir -p /var/lib/streamforge && chown streamforge /var/lib/streamforge && chmod 0700 /var/lib/streamforge
USER streamforge
EXPOSE 8000
# No --proxy-headers: daphne would take the client address from the left of X-Forwarded-For, which any
# client can write; STREAMFORGE_BEHIND_PROXY / STREAMFORGE_PROXY_COUNT read the entry the proxy added.
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "streamforge_web.asgi:application"]
