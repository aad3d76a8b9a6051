# A PyFlink program in the shape of the "Common Structure" of PyFlink's "Intro to the Python
# DataStream API": a NumberSequenceSource, a Row-typed map, a keyed MapFunction with value
# state, typed printing. Written for accelflow's tests; it runs on PyFlink as it is.
from pyflink.common import Row, WatermarkStrategy
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import MapFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class FirstTwoCounted(MapFunction):

    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor('count', Types.PICKLED_BYTE_ARRAY()))

    def map(self, value):
        count = self.count.value()
        if count is None or count < 2:
            self.count.update(1 if count is None else count + 1)
            return value[0], value[1] + 1
        return value[0], value[1]


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
ds = env.from_source(source=NumberSequenceSource(1, 40),
                     watermark_strategy=WatermarkStrategy.for_monotonous_timestamps(),
                     source_name='seq_num_source', type_info=Types.LONG())
ds.map(lambda a: Row(a % 4, 1), output_type=Types.ROW([Types.LONG(), Types.LONG()])) \
  .key_by(lambda a: a[0]) \
  .map(FirstTwoCounted(), output_type=Types.TUPLE([Types.LONG(), Types.LONG()])) \
  .print()
env.execute('sequence_keyed_map')
