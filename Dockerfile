# The StreamForge Web image used by compose.yaml for web, worker, beat (and, later, dlq-ingest).
# Stage 1 fetches Spark's Kafka connector and RE2/J with the poms devstack uses and builds our regex UDF jar
# (pipelines/spark/jvm) as devstack.jars does; stage 2 is the application.
FROM maven:3.9-eclipse-temurin-17 AS connector
COPY devstack/maven /maven
COPY pipelines/spark/jvm /jvm
RUN mvn -q -B -s /maven/settings.xml -f /maven/spark-kafka.xml dependency:copy-dependencies \
      -DoutputDirectory=/opt/spark-kafka -DincludeScope=runtime \
      -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
 && mvn -q -B -s /maven/settings.xml -f /maven/re2j.xml dependency:copy-dependencies \
      -DoutputDirectory=/opt/spark-kafka -DincludeScope=runtime \
 && mvn -q -B -s /maven/settings.xml dependency:copy -Dartifact=org.apache.spark:spark-sql-api_2.13:4.2.0 \
      -DoutputDirectory=/tmp/spark-api \
 && mkdir /tmp/classes \
 && javac --release 17 -encoding UTF-8 -cp "/tmp/spark-api/*:/opt/spark-kafka/*" -d /tmp/classes $(find /jvm -name '*.java') \
 && jar cf /opt/spark-kafka/streamforge-regex.jar -C /tmp/classes .

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
# The driver JVM's class-data-sharing archive (pipelines.spark.class_archive: a third less JVM CPU per start).
RUN mkdir -p /opt/streamforge \
 && python -m pipelines.spark.archive_dump /opt/streamforge/driver.jsa \
      --jars "$(find /opt/spark-kafka -name '*.jar' | sort | paste -sd, -)"
ENV STREAMFORGE_DRIVER_CLASS_ARCHIVE=/opt/streamforge/driver.jsa
USER streamforge
EXPOSE 8000
# uvicorn with WEB_CONCURRENCY worker processes (Django's sync views answer one request at a time per process
# under ASGI; devstack.services.web_command is the same line). --no-proxy-headers: uvicorn would take the
# client address from X-Forwarded-For, which any client can write; STREAMFORGE_BEHIND_PROXY /
# STREAMFORGE_PROXY_COUNT read the entry the proxy added. No lifespan events: Django's ASGI handler has none.
ENV WEB_CONCURRENCY=2
CMD ["uvicorn", "streamforge_web.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--no-proxy-headers", "--lifespan", "off", "--timeout-graceful-shutdown", "5"]
