"""Connectors to systems outside accelflow: exactly-once files (:mod:`.files`) and Kafka
(:mod:`.kafka`, extra ``accelflow[kafka]``)."""
