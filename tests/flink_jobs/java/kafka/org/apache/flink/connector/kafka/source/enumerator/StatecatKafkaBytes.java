/*
 * Writes the bytes a Kafka source leaves in a Flink savepoint, for known inputs, using the
 * connector's own serializer classes (compiled from apache/flink-connector-kafka by
 * tests/fixtures/source_positions/generate.py, never committed) and Flink's own framing classes
 * (the PyFlink 2.3.0 jars):
 *
 *   reader_split_<n>.bin   one SourceReaderState element: BytePrimitiveArraySerializer framing of
 *                          SimpleVersionedSerialization.writeVersionAndSerialize(
 *                              KafkaPartitionSplitSerializer, split)   (what SourceOperator stores)
 *   coordinator_v<k>.bin   the operator coordinator's checkpoint: SourceCoordinator
 *                          .writeCheckpointBytes(enumState, serializer), with the connector's
 *                          current enumerator-state format (v3) and its older v1 / v2 formats
 *                          (KafkaSourceEnumStateSerializer.serializeV1 / serializeV2)
 *   expected.json          the values statecat must decode: what the connector's own
 *                          deserializers read back from those bytes
 *
 *   java -cp <classes>:<pyflink lib>/* \
 *       org.apache.flink.connector.kafka.source.enumerator.StatecatKafkaBytes OUT_DIR
 *
 * Lives in the connector's enumerator package to reach the package-private serializeV1/V2.
 */
package org.apache.flink.connector.kafka.source.enumerator;

import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplit;
import org.apache.flink.connector.kafka.source.split.KafkaPartitionSplitSerializer;
import org.apache.flink.core.io.SimpleVersionedSerialization;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.core.memory.DataOutputViewStreamWrapper;

import org.apache.kafka.common.TopicPartition;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

public final class StatecatKafkaBytes {

    private StatecatKafkaBytes() {}

    /** A serializer that frames older enumerator-state formats with their own version number. */
    private static final class Versioned implements SimpleVersionedSerializer<KafkaSourceEnumState> {
        private final int version;

        Versioned(int version) {
            this.version = version;
        }

        @Override
        public int getVersion() {
            return version;
        }

        @Override
        public byte[] serialize(KafkaSourceEnumState state) throws IOException {
            if (version == 1) {
                List<KafkaPartitionSplit> splits = new ArrayList<>();
                for (SplitAndAssignmentStatus s : state.splits()) {
                    splits.add(s.split());
                }
                return KafkaSourceEnumStateSerializer.serializeV1(splits);
            }
            return KafkaSourceEnumStateSerializer.serializeV2(
                    state.splits(), state.initialDiscoveryFinished());
        }

        @Override
        public KafkaSourceEnumState deserialize(int version, byte[] serialized) {
            throw new UnsupportedOperationException();
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]);
        Files.createDirectories(out);
        StringBuilder json = new StringBuilder("{\n \"reader_splits\": [\n");

        KafkaPartitionSplit[] splits = {
            new KafkaPartitionSplit(new TopicPartition("orders", 0), 42L),
            new KafkaPartitionSplit(
                    new TopicPartition("orders", 3), 1234567890123L, 1234567890999L),
            new KafkaPartitionSplit(
                    new TopicPartition("événements.v2", 7),
                    KafkaPartitionSplit.EARLIEST_OFFSET,
                    KafkaPartitionSplit.LATEST_OFFSET),
            new KafkaPartitionSplit(
                    new TopicPartition("payments", 11),
                    KafkaPartitionSplit.COMMITTED_OFFSET,
                    KafkaPartitionSplit.COMMITTED_OFFSET),
        };
        KafkaPartitionSplitSerializer splitSerializer = new KafkaPartitionSplitSerializer();
        for (int i = 0; i < splits.length; i++) {
            byte[] versioned =
                    SimpleVersionedSerialization.writeVersionAndSerialize(splitSerializer, splits[i]);
            ByteArrayOutputStream element = new ByteArrayOutputStream();
            BytePrimitiveArraySerializer.INSTANCE.serialize(
                    versioned, new DataOutputViewStreamWrapper(element));
            String file = "reader_split_" + i + ".bin";
            Files.write(out.resolve(file), element.toByteArray());
            // expected: what the connector itself reads back from these bytes
            KafkaPartitionSplit back =
                    SimpleVersionedSerialization.readVersionAndDeSerialize(splitSerializer, versioned);
            json.append(i == 0 ? "" : ",\n")
                    .append("  {\"file\": \"").append(file).append("\", ")
                    .append(splitJson(back, splitSerializer.getVersion())).append("}");
        }
        json.append("\n ],\n \"coordinator\": [\n");

        Set<SplitAndAssignmentStatus> entries = new LinkedHashSet<>();
        entries.add(new SplitAndAssignmentStatus(
                new KafkaPartitionSplit(new TopicPartition("orders", 0), KafkaPartitionSplit.EARLIEST_OFFSET),
                AssignmentStatus.ASSIGNED));
        entries.add(new SplitAndAssignmentStatus(
                new KafkaPartitionSplit(new TopicPartition("orders", 3), 500L, 900L),
                AssignmentStatus.ASSIGNED));
        entries.add(new SplitAndAssignmentStatus(
                new KafkaPartitionSplit(new TopicPartition("événements.v2", 7), KafkaPartitionSplit.COMMITTED_OFFSET),
                AssignmentStatus.UNASSIGNED));
        KafkaSourceEnumState state = new KafkaSourceEnumState(entries, true);

        Class<?> coordinator = Class.forName("org.apache.flink.runtime.source.coordinator.SourceCoordinator");
        Method write = coordinator.getDeclaredMethod(
                "writeCheckpointBytes", Object.class, SimpleVersionedSerializer.class);
        write.setAccessible(true);
        List<SimpleVersionedSerializer<KafkaSourceEnumState>> serializers = new ArrayList<>();
        serializers.add(new KafkaSourceEnumStateSerializer());
        serializers.add(new Versioned(2));
        serializers.add(new Versioned(1));
        boolean first = true;
        for (SimpleVersionedSerializer<KafkaSourceEnumState> serializer : serializers) {
            String file = "coordinator_v" + serializer.getVersion() + ".bin";
            Files.write(out.resolve(file), (byte[]) write.invoke(null, state, serializer));
            json.append(first ? "" : ",\n").append("  {\"file\": \"").append(file)
                    .append("\", \"enumerator_version\": ").append(serializer.getVersion())
                    .append(", \"initial_discovery_finished\": ")
                    .append(new KafkaSourceEnumStateSerializer()
                            .deserialize(serializer.getVersion(), serializer.serialize(state))
                            .initialDiscoveryFinished()).append(", \"partitions\": [");
            first = false;
            boolean firstEntry = true;
            // expected: what the connector's own deserializer makes of this version's bytes
            KafkaSourceEnumState back = new KafkaSourceEnumStateSerializer()
                    .deserialize(serializer.getVersion(), serializer.serialize(state));
            for (SplitAndAssignmentStatus s : back.splits()) {
                json.append(firstEntry ? "" : ", ").append("{")
                        .append(splitJson(s.split(), splitSerializer.getVersion()))
                        .append(", \"status\": \"").append(s.assignmentStatus().name()).append("\"}");
                firstEntry = false;
            }
            json.append("]}");
        }
        json.append("\n ]\n}\n");
        Files.write(out.resolve("expected.json"), json.toString().getBytes(StandardCharsets.UTF_8));
    }

    private static String splitJson(KafkaPartitionSplit split, int version) {
        // Java's own view of the split: the stopping offset as the serializer writes it.
        long stopping = split.getStoppingOffset().orElse(KafkaPartitionSplit.NO_STOPPING_OFFSET);
        return "\"split_version\": " + version + ", \"topic\": \"" + split.getTopic()
                + "\", \"partition\": " + split.getPartition() + ", \"starting_offset\": "
                + split.getStartingOffset() + ", \"stopping_offset\": " + stopping;
    }
}
