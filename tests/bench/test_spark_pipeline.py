from bench.spark_pipeline import _realtime_master


def test_the_realtime_variant_widens_a_local_master_to_a_slot_per_source_partition():
    assert _realtime_master("local[2]", 4) == "local[4]"
    assert _realtime_master("local[8]", 4) == "local[8]"
    assert _realtime_master("spark://host:7077", 4) == "spark://host:7077"
