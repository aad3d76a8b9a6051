# Keyed value state in a FlatMapFunction: the count-window average of PyFlink's "Working with
# State" page (emit the average of every two values of a key, then start over). Written for
# accelflow's tests; it runs on PyFlink as it is.
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import FlatMapFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class CountWindowAverage(FlatMapFunction):

    def __init__(self):
        self.sum = None

    def open(self, runtime_context: RuntimeContext):
        descriptor = ValueStateDescriptor("average", Types.PICKLED_BYTE_ARRAY())
        self.sum = runtime_context.get_state(descriptor)

    def flat_map(self, value):
        current_sum = self.sum.value()
        if current_sum is None:
            current_sum = (0, 0)
        current_sum = (current_sum[0] + 1, current_sum[1] + value[1])
        self.sum.update(current_sum)
        if current_sum[0] >= 2:
            self.sum.clear()
            yield value[0], int(current_sum[1] / current_sum[0])


env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([(1, 3), (1, 5), (1, 7), (2, 4), (1, 2), (2, 6)]) \
    .key_by(lambda row: row[0]) \
    .flat_map(CountWindowAverage()) \
    .print()
env.execute()
