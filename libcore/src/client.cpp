#include "ddstage/client.hpp"
