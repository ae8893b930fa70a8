"""The local stack: Kafka (KRaft), Redis and friends as plain processes with PID files under var/."""
