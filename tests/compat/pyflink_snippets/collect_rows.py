# Rows from a typed collection, collected to the client with PyFlink's closeable iterator (the
# "Create from a list object" and "Collect results to client" steps of PyFlink's DataStream
# intro). Written for accelflow's tests; it runs on PyFlink as it is.
from pyflink.common import Row
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection(
    collection=[(1, 'aaa|bb'), (2, 'bb|a'), (3, 'aaa|a')],
    type_info=Types.ROW([Types.INT(), Types.STRING()]))
with ds.execute_and_collect() as results:
    for result in results:
        print(result, result[0], isinstance(result, Row))
named = env.from_collection(
    collection=[(1, 'Flink', 0.5)],
    type_info=Types.ROW_NAMED(['id', 'name', 'score'], [Types.INT(), Types.STRING(), Types.DOUBLE()]))
with named.map(lambda r: (r.id, r.name, r['score'] * 2)).execute_and_collect() as results:
    for result in results:
        print(result)
