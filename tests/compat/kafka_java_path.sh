#!/bin/sh
# Lay out a minimal KAFKA_PATH holding Kafka's Java client, for the librdkafka test-suite programs
# that drive it (tests/java/run-class.sh: 0098_consumer_txn's TransactionProducerCli, 0113's
# IncrementalRebalanceCli, Murmur2Cli). No Kafka distribution is reachable here, but PyPI's
# shigawire-apache-flink-libraries wheel (a third party's repackaging of Flink's libraries, pinned
# here by its sha256) ships Kafka's kafka-clients jar (3.9.1) with slf4j-api and the compression
# libraries, so:
#
#   DIR/libs/kafka-clients-3.9.1.jar (+ slf4j-api, lz4-java, snappy-java, zstd-jni)
#   DIR/bin/kafka-run-class.sh        java -cp "$CLASSPATH:DIR/libs/*" CLASS ARGS...
#
# which is what librdkafka's tests/java/Makefile (javac -classpath $KAFKA_PATH/libs/kafka-clients-*.jar)
# and run-class.sh (CLASSPATH=tests/java $KAFKA_PATH/bin/kafka-run-class.sh CLASS ARGS) use.
#
#   tests/compat/kafka_java_path.sh /work/ext/kafka-java [PIP]     # then KAFKA_PATH=/work/ext/kafka-java
set -eu
dir=${1:?usage: $0 DIR [PIP]}
pip=${2:-pip}
wheel_pkg=shigawire-apache-flink-libraries==2.0.0.post1
wheel_sha256=aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd
mkdir -p "$dir/libs" "$dir/bin" "$dir/wheel"
dir=$(cd "$dir" && pwd)
if ! ls "$dir"/libs/kafka-clients-*.jar >/dev/null 2>&1; then
    printf '%s --hash=sha256:%s\n' "$wheel_pkg" "$wheel_sha256" > "$dir/wheel/requirements.txt"
    "$pip" download --quiet --no-deps --require-hashes -d "$dir/wheel" -r "$dir/wheel/requirements.txt"
    whl=$(ls "$dir"/wheel/shigawire_apache_flink_libraries-*.whl)
    tmp=$(mktemp -d)
    for jar in kafka-clients slf4j-api lz4-java snappy-java zstd-jni; do
        unzip -q -o -d "$tmp" "$whl" "pyflink/lib/$jar.jar"
    done
    version=$(unzip -p "$tmp/pyflink/lib/kafka-clients.jar" kafka/kafka-version.properties | sed -n 's/^version=//p')
    mv "$tmp/pyflink/lib/kafka-clients.jar" "$dir/libs/kafka-clients-$version.jar"
    mv "$tmp"/pyflink/lib/*.jar "$dir/libs/"
    rm -rf "$tmp" "$dir/wheel"
fi
cat > "$dir/bin/kafka-run-class.sh" <<'EOF'
#!/bin/sh
# The part of Kafka's kafka-run-class.sh that librdkafka's tests use: run CLASS with the caller's
# CLASSPATH followed by every jar in libs/.
base=$(cd "$(dirname "$0")/.." && pwd)
exec java ${KAFKA_HEAP_OPTS:--Xmx256M} -cp "${CLASSPATH:+$CLASSPATH:}$base/libs/*" "$@"
EOF
chmod +x "$dir/bin/kafka-run-class.sh"
ls "$dir/libs"
