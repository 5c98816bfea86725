/* A minimal reader of ONNX TensorProto files (input_0.pb, output_0.pb of ONNX test cases):
 * dims, data_type, name and the data from raw_data or the typed repeated fields. Plain C99. */
#ifndef CUVIL_EXAMPLES_AOT_TENSOR_PROTO_H_
#define CUVIL_EXAMPLES_AOT_TENSOR_PROTO_H_

#include <stddef.h>
#include <stdint.h>

typedef struct tensor_proto {
  int32_t data_type; /* ONNX TensorProto.DataType */
  int32_t rank;
  int64_t dims[16];
  char name[256];
  unsigned char* data; /* elements, little-endian, malloc'd; free with tensor_proto_free */
  size_t bytes;
} tensor_proto;

/* Bytes per element of an ONNX data type the reader supports; 0 otherwise. */
size_t tensor_proto_elem_size(int32_t data_type);

/* Reads `path` into `t`. Returns 0, or -1 with a message on stderr. */
int tensor_proto_read(const char* path, tensor_proto* t);

void tensor_proto_free(tensor_proto* t);

/* Element i as a double (float32, float64, int8/16/32/64, uint8/16, bool). */
double tensor_proto_get(const tensor_proto* t, size_t i);

#endif /* CUVIL_EXAMPLES_AOT_TENSOR_PROTO_H_ */
