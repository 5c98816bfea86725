/* See tensor_proto.h. Protobuf wire format: each field is a varint key (number << 3 | wire type)
 * followed by a varint (type 0), 8 bytes (1), a length-prefixed blob (2) or 4 bytes (5). */
#include "tensor_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t tensor_proto_elem_size(int32_t data_type) {
  switch (data_type) {
    case 1:
    case 6:
    case 12:
      return 4; /* float32, int32, uint32 */
    case 2:
    case 3:
    case 9:
      return 1; /* uint8, int8, bool */
    case 4:
    case 5:
    case 10:
    case 16:
      return 2;
    case 7:
    case 11:
    case 13:
      return 8; /* int64, float64, uint64 */
    default:
      return 0;
  }
}

static int read_varint(const unsigned char** p, const unsigned char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    unsigned char b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return 0;
  }
  return -1;
}

/* Appends n bytes to t->data. */
static int append(tensor_proto* t, const void* src, size_t n) {
  unsigned char* grown = realloc(t->data, t->bytes + n + 1);
  if (grown == NULL) return -1;
  t->data = grown;
  memcpy(t->data + t->bytes, src, n);
  t->bytes += n;
  return 0;
}

/* A typed repeated field (packed blob or one unpacked value) appended as `width`-byte elements. */
static int append_typed(tensor_proto* t, int wire, const unsigned char* blob, size_t len,
                        uint64_t scalar, int varint_field, size_t width) {
  if (!varint_field) {
    if (wire == 2) return append(t, blob, len);
    return append(t, &scalar, width); /* fixed32 / fixed64 value (little-endian host) */
  }
  const unsigned char* p = wire == 2 ? blob : NULL;
  const unsigned char* end = wire == 2 ? blob + len : NULL;
  for (;;) {
    uint64_t v = scalar;
    if (p != NULL) {
      if (p >= end) return 0;
      if (read_varint(&p, end, &v) != 0) return -1;
    }
    if (append(t, &v, width) != 0) return -1; /* low bytes of the value */
    if (p == NULL) return 0;
  }
}

int tensor_proto_read(const char* path, tensor_proto* t) {
  memset(t, 0, sizeof(*t));
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = malloc(size > 0 ? (size_t)size : 1);
  if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "cannot read %s\n", path);
    fclose(f);
    free(buf);
    return -1;
  }
  fclose(f);
  const unsigned char* p = buf;
  const unsigned char* end = buf + size;
  int ok = 0;
  while (p < end && ok == 0) {
    uint64_t key, v = 0;
    const unsigned char* blob = NULL;
    size_t len = 0;
    if (read_varint(&p, end, &key) != 0) break;
    int field = (int)(key >> 3), wire = (int)(key & 7);
    if (wire == 0) {
      ok = read_varint(&p, end, &v);
    } else if (wire == 1 || wire == 5) {
      size_t n = wire == 1 ? 8 : 4;
      if ((size_t)(end - p) < n) {
        ok = -1;
        break;
      }
      memcpy(&v, p, n);
      p += n;
    } else if (wire == 2) {
      ok = read_varint(&p, end, &v);
      if (ok != 0 || v > (uint64_t)(end - p)) {
        ok = -1;
        break;
      }
      blob = p;
      len = (size_t)v;
      p += len;
    } else {
      ok = -1;
      break;
    }
    if (ok != 0) break;
    switch (field) {
      case 1: /* dims (packed or not) */
        if (wire == 2) {
          const unsigned char* q = blob;
          while (q < blob + len && ok == 0 && t->rank < 16) {
            ok = read_varint(&q, blob + len, &v);
            t->dims[t->rank++] = (int64_t)v;
          }
        } else if (t->rank < 16) {
          t->dims[t->rank++] = (int64_t)v;
        }
        break;
      case 2:
        t->data_type = (int32_t)v;
        break;
      case 8:
        if (wire == 2) {
          size_t n = len < sizeof(t->name) - 1 ? len : sizeof(t->name) - 1;
          memcpy(t->name, blob, n);
          t->name[n] = '\0';
        }
        break;
      case 9:
        if (wire == 2) ok = append(t, blob, len);
        break; /* raw_data */
      case 4:
        ok = append_typed(t, wire, blob, len, v, 0, 4);
        break; /* float_data */
      case 10:
        ok = append_typed(t, wire, blob, len, v, 0, 8);
        break; /* double_data */
      case 7:
        ok = append_typed(t, wire, blob, len, v, 1, 8);
        break; /* int64_data */
      case 5:  /* int32_data: int32, and uint8/int8/bool/16-bit types stored widened */
        ok = append_typed(
            t, wire, blob, len, v, 1,
            tensor_proto_elem_size(t->data_type) ? tensor_proto_elem_size(t->data_type) : 4);
        break;
      default:
        break;
    }
  }
  free(buf);
  if (ok != 0) {
    fprintf(stderr, "%s: not a TensorProto\n", path);
    tensor_proto_free(t);
    return -1;
  }
  return 0;
}

void tensor_proto_free(tensor_proto* t) {
  free(t->data);
  t->data = NULL;
  t->bytes = 0;
}

double tensor_proto_get(const tensor_proto* t, size_t i) {
  const unsigned char* p = t->data + i * tensor_proto_elem_size(t->data_type);
  switch (t->data_type) {
    case 1: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case 11: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case 6: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case 7: {
      int64_t v;
      memcpy(&v, p, 8);
      return (double)v;
    }
    case 3:
      return (int8_t)p[0];
    case 2:
    case 9:
      return p[0];
    case 5: {
      int16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint16_t v;
      memcpy(&v, p, 2);
      return v;
    }
    default:
      return 0;
  }
}
