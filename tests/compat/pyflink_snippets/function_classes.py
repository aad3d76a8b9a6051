# PyFlink's function classes and operators of its "Operators" overview: MapFunction,
# FlatMapFunction, FilterFunction, KeySelector, ReduceFunction, a Partitioner, union and
# connect with a CoMapFunction. Written for accelflow's tests; it runs on PyFlink as it is.
from pyflink.common import Configuration
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import (CoMapFunction, FilterFunction, FlatMapFunction, KeySelector,
                                          MapFunction, Partitioner, ReduceFunction)


class Double(MapFunction):
    def map(self, value):
        return value * 2


class Digits(FlatMapFunction):
    def flat_map(self, value):
        for digit in str(value):
            yield int(digit)


class Odd(FilterFunction):
    def filter(self, value):
        return value % 2 == 1


class Parity(KeySelector):
    def get_key(self, value):
        return value % 2


class Add(ReduceFunction):
    def reduce(self, value1, value2):
        return value1 + value2


class ByParity(Partitioner):
    def partition(self, key, num_partitions):
        return key % num_partitions


class Tagged(CoMapFunction):
    def map1(self, value):
        return 'number', str(value)

    def map2(self, value):
        return 'word', value


config = Configuration()
config.set_integer('parallelism.default', 1)
env = StreamExecutionEnvironment.get_execution_environment(config)
numbers = env.from_collection([3, 14, 15, 92, 65], type_info=Types.INT())
numbers.map(Double(), output_type=Types.INT()).flat_map(Digits(), output_type=Types.INT()) \
    .filter(Odd()).key_by(Parity()).reduce(Add()).print()
env.execute('functions')
numbers.union(env.from_collection([1, 2], type_info=Types.INT())) \
    .partition_custom(ByParity(), lambda x: x).map(lambda x: x + 100, output_type=Types.INT()).print()
env.execute('union')
numbers.connect(env.from_collection(['a', 'b'], type_info=Types.STRING())) \
    .map(Tagged(), output_type=Types.TUPLE([Types.STRING(), Types.STRING()])).print()
env.execute('connect')
