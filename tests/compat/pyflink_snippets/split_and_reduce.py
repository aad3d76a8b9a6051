# flat_map to Row and Tuple types, key_by, reduce, print: the two variants of the "Emit Results"
# example of PyFlink's DataStream intro, printed rather than written to a table. Written for
# accelflow's tests; it runs on PyFlink as it is.
from pyflink.common import Row
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection(
    collection=[(1, 'aaa|bb'), (2, 'bb|a'), (3, 'aaa|a')],
    type_info=Types.ROW([Types.INT(), Types.STRING()]))


def split_rows(s):
    for sp in s[1].split("|"):
        yield Row(s[0], sp)


def split_tuples(s):
    for sp in s[1].split("|"):
        yield s[0], sp


ds.map(lambda i: (i[0] + 1, i[1])) \
  .flat_map(split_rows, Types.ROW([Types.INT(), Types.STRING()])) \
  .key_by(lambda i: i[1]) \
  .reduce(lambda i, j: Row(i[0] + j[0], i[1])) \
  .print()
env.execute('rows')
ds.map(lambda i: (i[0] + 1, i[1])) \
  .flat_map(split_tuples, Types.TUPLE([Types.INT(), Types.STRING()])) \
  .key_by(lambda i: i[1]) \
  .reduce(lambda i, j: (i[0] + j[0], i[1])) \
  .print()
env.execute('tuples')
