/*
 * Stand-in for kafka-clients' org.apache.kafka.common.TopicPartition, so that the Kafka
 * connector's split and enumerator-state serializers compile and run without kafka-clients
 * (no Maven here). Only what those serializers and KafkaPartitionSplit use: topic(),
 * partition(), equals/hashCode (splits live in hash sets) and toString ("topic-partition",
 * as kafka-clients formats it; KafkaPartitionSplit uses it as the split id, which is not
 * serialized).
 */
package org.apache.kafka.common;

import java.util.Objects;

public final class TopicPartition {
    private final String topic;
    private final int partition;

    public TopicPartition(String topic, int partition) {
        this.topic = topic;
        this.partition = partition;
    }

    public String topic() {
        return topic;
    }

    public int partition() {
        return partition;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TopicPartition
                && partition == ((TopicPartition) o).partition
                && Objects.equals(topic, ((TopicPartition) o).topic);
    }

    @Override
    public int hashCode() {
        return Objects.hash(topic, partition);
    }

    @Override
    public String toString() {
        return topic + "-" + partition;
    }
}
